/**
 * The worker's pull requests (issue 25): on a cluster nats-server proposes
 * every pull request to the consumer's Raft group when it arrives and again
 * when it ends, so the worker keeps one long-lived request open for all its
 * room instead of one a second. A monitor subscription on the consumer's
 * `$JS.API.CONSUMER.MSG.NEXT` subject counts the requests.
 */

import { strict as assert } from "node:assert";
import { after, before, describe, test } from "node:test";

import { connect } from "@nats-io/transport-node";
import { AckPolicy, jetstreamManager } from "@nats-io/jetstream";
import type { ConsumerConfig, JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection, Subscription } from "@nats-io/nats-core";

import * as sdk from "../src/index.js";
import { Backoff, limitsOf } from "../src/worker.js";
import { agentName, eventually, Server } from "@interlock/testing";

let server: Server;
let nc: NatsConnection;
let client: sdk.Client;

before(async () => {
  server = await Server.start();
  nc = await connect({ servers: server.url });
  client = new sdk.Client(nc, { timeoutMs: 20_000 });
});

after(async () => {
  client.close();
  await nc.close();
  await server.stop();
});

const quiet: sdk.Logger = { warn: () => undefined, error: () => undefined };

/** The pull requests sent for `worker_<agent>`, as they are sent. */
async function countPulls(agent: string): Promise<{ seen: Record<string, unknown>[]; sub: Subscription }> {
  const seen: Record<string, unknown>[] = [];
  const sub = nc.subscribe(`$JS.API.CONSUMER.MSG.NEXT.INTERLOCK_WORK.worker_${agent}`, {
    callback: (_, m) => {
      seen.push(m.json<Record<string, unknown>>());
    },
  });
  await nc.flush();
  return { seen, sub };
}

/** Creates `worker_<agent>` as an operator would, with `extra` settings, and returns the manager. */
async function operatorConsumer(agent: string, extra: Partial<ConsumerConfig>): Promise<JetStreamManager> {
  const jsm = await jetstreamManager(nc);
  await jsm.consumers.add("INTERLOCK_WORK", {
    durable_name: "worker_" + agent,
    filter_subjects: [`interlock.work.${agent}`, `interlock.start.${agent}`],
    ack_policy: AckPolicy.Explicit,
    ...extra,
  });
  return jsm;
}

describe("the worker's pull requests", () => {
  test("one per batch, not one per message, and each message handled as it arrives", async () => {
    const agent = agentName();
    const { seen, sub } = await countPulls(agent);
    const n = 20;
    const room = 5;
    const w = new sdk.Worker(nc, { logger: quiet, concurrency: room });
    w.register(agent, (input) => input);
    await w.start();
    const began = Date.now();
    try {
      for (let i = 0; i < n; i++) {
        const rec = await client.wait(await client.start(agent, i));
        assert.equal(rec.result, i);
      }
    } finally {
      await w.stop(1000);
    }
    const took = Date.now() - began;
    sub.unsubscribe();
    assert.ok(seen.length <= n / room + 2, `${seen.length} pull requests for ${n} items handled one at a time: ${JSON.stringify(seen)}`);
    // Under one open request's wait (10 s) for all twenty: none waited for
    // its request to fill or expire.
    assert.ok(took < 10_000, `${n} items one at a time took ${took} ms`);
  });

  test("an idle worker keeps one request open, with heartbeats", async () => {
    const agent = agentName();
    const { seen, sub } = await countPulls(agent);
    const w = new sdk.Worker(nc, { logger: quiet, concurrency: 3 });
    w.register(agent, (input) => input);
    await w.start();
    try {
      await eventually(() => seen.length > 0, 15_000, "the worker's first pull request");
      // The window measured: four idle seconds, well within one request's wait.
      await new Promise((ok) => setTimeout(ok, 4000));
    } finally {
      await w.stop(1000);
    }
    sub.unsubscribe();
    assert.equal(seen.length, 1, `${seen.length} pull requests in four idle seconds: ${JSON.stringify(seen)}`);
    assert.equal(seen[0]!["batch"], 3);
    assert.ok(seen[0]!["idle_heartbeat"], JSON.stringify(seen[0]));
  });

  test("a request nobody holds is replaced after two missed heartbeats", async () => {
    // A request lost in a failover gets no heartbeats. Here it is lost with
    // its consumer: deleted, it answers nothing, and the worker asks again
    // within 8 s (under one request's 10 s wait); once the consumer is back
    // its next request takes the work.
    const agent = agentName();
    const durable = "worker_" + agent;
    const { seen, sub } = await countPulls(agent);
    const w = new sdk.Worker(nc, { logger: quiet, concurrency: 2 });
    w.register(agent, (input) => input);
    await w.start();
    const jsm = await jetstreamManager(nc);
    try {
      await eventually(() => seen.length >= 1, 15_000, "the worker's first pull request");
      const info = await jsm.consumers.info("INTERLOCK_WORK", durable);
      await jsm.consumers.delete("INTERLOCK_WORK", durable);
      // Asked again twice: once the first request ended (or went silent),
      // and again when that one, to no consumer, missed its heartbeats.
      await eventually(() => seen.length >= 3, 8000, "requests sent again while the consumer is gone");
      await jsm.consumers.add("INTERLOCK_WORK", info.config);
      const rec = await client.wait(await client.start(agent, "back"));
      assert.equal(rec.result, "back");
    } finally {
      await w.stop(1000);
      sub.unsubscribe();
    }
  });

  test("failures in a row wait longer, up to 2 s, and warn from the fourth", () => {
    const b = new Backoff();
    const steps = Array.from({ length: 70 }, () => b.failed());
    assert.deepEqual(
      steps.slice(0, 7).map((s) => s.wait),
      [100, 200, 400, 800, 1600, 2000, 2000],
    );
    assert.deepEqual(
      steps.flatMap((s, i) => (s.warn ? [i + 1] : [])),
      [4, 34, 64],
    );
    b.reset();
    assert.deepEqual(b.failed(), { wait: 100, warn: false });
  });

  test("refused requests back off and say why", async () => {
    // A consumer an operator made one of priority groups refuses every
    // pull request that names no group (status 400). The worker asked
    // again at once, for good; it waits longer after each refusal (0.1 s
    // doubling to 2 s) and warns, naming the server's reason.
    const agent = agentName();
    await operatorConsumer(agent, { priority_policy: "overflow", priority_groups: ["jobs"] });
    const { seen, sub } = await countPulls(agent);
    const warnings: string[] = [];
    const w = new sdk.Worker(nc, { logger: { warn: (m) => warnings.push(m), error: () => undefined }, concurrency: 3 });
    w.register(agent, (input) => input);
    await w.start();
    try {
      // The window measured: three seconds of refusals.
      await new Promise((ok) => setTimeout(ok, 3000));
    } finally {
      await w.stop(1000);
      sub.unsubscribe();
    }
    assert.ok(seen.length > 0 && seen.length <= 8, `${seen.length} pull requests in 3 s while the server refuses every one`);
    assert.ok(warnings.some((m) => /priority group/i.test(m)), JSON.stringify(warnings.slice(0, 3)));
  });

  for (const [name, limits, later] of [
    ["batch", { max_batch: 1 }, false],
    ["expires", { max_expires: 2_000_000_000 }, false],
    ["both, set while it runs", { max_batch: 2, max_expires: 1_000_000_000 }, true],
  ] as const) {
    test(`requests stay within the consumer's limits: ${name}`, async () => {
      // A worker asks within the limits an operator set on its consumer
      // (max_batch, max_expires). It asked for all its room in a request of
      // ten seconds, which the server refuses every time (status 409
      // "Exceeded MaxRequestBatch"), so it got no work at all. Limits found
      // when it binds are followed from the first request; limits set while
      // it runs, from the request after the first one refused.
      const agent = agentName();
      const durable = "worker_" + agent;
      const jsm = await jetstreamManager(nc);
      const config = {
        durable_name: durable,
        filter_subjects: [`interlock.work.${agent}`, `interlock.start.${agent}`],
        ack_policy: AckPolicy.Explicit,
      };
      await jsm.consumers.add("INTERLOCK_WORK", later ? config : { ...config, ...limits });
      // The server's refusals, to whichever inbox: none while the worker
      // asks within the limits it read.
      let refused = 0;
      const replies = nc.subscribe("_INBOX.>", {
        callback: (_err, m) => {
          if (m.headers?.code === 409) refused++;
        },
      });
      const warnings: string[] = [];
      const w = new sdk.Worker(nc, { logger: { warn: (m) => warnings.push(m), error: () => undefined }, concurrency: 4 });
      w.register(agent, (input) => input);
      await w.start();
      try {
        if (later) await jsm.consumers.update("INTERLOCK_WORK", durable, limits);
        const runs = [];
        for (let i = 0; i < 6; i++) runs.push(await client.start(agent, i));
        const results = [];
        for (const r of runs) results.push((await client.wait(r, undefined, { timeoutMs: 30_000 })).result);
        assert.deepEqual(results, [0, 1, 2, 3, 4, 5]);
        if (later) {
          assert.ok(warnings.some((m) => /allows 2 messages and 1000 ms/.test(m)), JSON.stringify(warnings));
        } else {
          assert.equal(refused, 0, "no request beyond the consumer's limits");
          assert.deepEqual(warnings, []);
        }
      } finally {
        replies.unsubscribe();
        await w.stop(1000);
      }
    });
  }

  test("in-progress acks follow the consumer's ack wait, not the worker's own", async () => {
    // A worker left at its default ackWaitMs (30 s) bound to a consumer an
    // operator gave 2 s acked in-progress every 15 s, and the server handed
    // the running pass to another handler.
    const agent = agentName();
    await operatorConsumer(agent, { ack_wait: 2_000_000_000 });
    let passes = 0;
    const w = new sdk.Worker(nc, { logger: quiet, concurrency: 2 });
    w.register(agent, async () => {
      passes++;
      await new Promise((ok) => setTimeout(ok, 5000)); // over twice the consumer's ack wait: the behaviour under test
      return passes;
    });
    await w.start();
    try {
      const run = await client.start(agent);
      assert.equal((await client.wait(run, undefined, { timeoutMs: 30_000 })).result, 1);
      assert.equal(passes, 1);
    } finally {
      await w.stop(1000);
    }
  });

  test("in-progress acks follow an ack wait lowered while a pass runs", async () => {
    // The worker reads its consumer again while a pass runs: an ack wait
    // lowered from 30 s to 3 s is followed at once by the item it holds,
    // whose next in-progress ack was 15 s away.
    const agent = agentName();
    const durable = "worker_" + agent;
    const jsm = await operatorConsumer(agent, { ack_wait: 30_000_000_000 });
    const warnings: string[] = [];
    let passes = 0;
    let started!: () => void;
    const running = new Promise<void>((ok) => (started = ok));
    let lower!: () => void;
    const lowered = new Promise<void>((ok) => (lower = ok));
    const w = new sdk.Worker(nc, { logger: { warn: (m) => warnings.push(m), error: () => undefined }, concurrency: 2, configReadMs: 200 });
    w.register(agent, async () => {
      passes++;
      started();
      await lowered;
      await new Promise((ok) => setTimeout(ok, 7000)); // over twice the new ack wait: the behaviour under test
      return passes;
    });
    await w.start();
    try {
      const run = await client.start(agent);
      await running;
      await jsm.consumers.update("INTERLOCK_WORK", durable, { ack_wait: 3_000_000_000 });
      await eventually(() => warnings.some((m) => /now waits 3000 ms/.test(m)), 3000, "the worker reads the lowered ack wait");
      lower();
      assert.equal((await client.wait(run, undefined, { timeoutMs: 30_000 })).result, 1);
      assert.equal(passes, 1);
    } finally {
      await w.stop(1000);
    }
  });

  test("limits: within max_batch and max_expires, in whole milliseconds, as nats.js allows", () => {
    const none = { batch: Number.MAX_SAFE_INTEGER, expires: 10_000, heartbeat: 1000, tooShort: false };
    assert.deepEqual(limitsOf({}), none);
    assert.deepEqual(limitsOf({ max_batch: 0, max_expires: 0 }), none);
    assert.deepEqual(limitsOf({ max_batch: 3 }), { ...none, batch: 3 });
    assert.deepEqual(limitsOf({ max_expires: 60_000_000_000 }), none);
    assert.deepEqual(limitsOf({ max_expires: 2_000_000_000 }), { ...none, expires: 2000, heartbeat: 500 });
    // Nanoseconds that are no whole millisecond, and a quarter that is none.
    assert.deepEqual(limitsOf({ max_expires: 3_333_333_333 }), { ...none, expires: 3333, heartbeat: 833 });
    // nats.js asks for 1 s and a 500 ms heartbeat at least (half of 1 s, which the server still takes).
    assert.deepEqual(limitsOf({ max_expires: 1_500_000_000 }), { ...none, expires: 1500, heartbeat: 500 });
    assert.deepEqual(limitsOf({ max_expires: 100_000_000 }), { ...none, expires: 1000, heartbeat: 500, tooShort: true });
  });

  test("it never holds more work items than its concurrency", async () => {
    const agent = agentName();
    let release!: () => void;
    const released = new Promise<void>((ok) => (release = ok));
    let running = 0;
    let peak = 0;
    const w = new sdk.Worker(nc, { logger: quiet, concurrency: 2 });
    w.register(agent, async (input) => {
      running++;
      peak = Math.max(peak, running);
      await released;
      running--;
      return input;
    });
    await w.start();
    const jsm = await jetstreamManager(nc);
    try {
      const runs = [];
      for (let i = 0; i < 5; i++) runs.push(await client.start(agent, i));
      await eventually(async () => {
        const info = await jsm.consumers.info("INTERLOCK_WORK", "worker_" + agent);
        return running === 2 && info.num_ack_pending === 2 && info.num_pending === 3;
      }, 15_000, "two passes running, three left in the stream");
      release();
      const results = [];
      for (const r of runs) results.push((await client.wait(r)).result);
      assert.deepEqual(results, [0, 1, 2, 3, 4]);
      assert.equal(peak, 2);
    } finally {
      await w.stop(1000);
    }
  });
});
