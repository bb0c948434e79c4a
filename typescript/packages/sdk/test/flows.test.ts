/**
 * The SDK against `interlock serve` built from this tree: the worker's and
 * the client's flows, end to end. Every wait is on a condition with a
 * deadline.
 */

import { strict as assert } from "node:assert";
import * as net from "node:net";
import { createHash } from "node:crypto";
import { after, before, describe, test } from "node:test";

import { connect } from "@nats-io/transport-node";
import { AckPolicy, jetstreamManager } from "@nats-io/jetstream";
import { headers, type NatsConnection } from "@nats-io/nats-core";

import * as sdk from "../src/index.js";
import { agentName, eventually, Server } from "@interlock/testing";

let server: Server;
let nc: NatsConnection;
let client: sdk.Client;
const workers: sdk.Worker[] = [];

before(async () => {
  server = await Server.start();
  nc = await connect({ servers: server.url });
  client = new sdk.Client(nc, { timeoutMs: 20_000 });
});

after(async () => {
  for (const w of workers) await w.stop(1000);
  client.close();
  await nc.close();
  await server.stop();
});

const quiet: sdk.Logger = { warn: () => undefined, error: () => undefined };

async function worker(agent: string, body: sdk.AgentBody, options: sdk.WorkerOptions = {}): Promise<sdk.Worker> {
  const w = new sdk.Worker(nc, { logger: quiet, backoffMs: [50], ...options });
  w.register(agent, body);
  await w.start();
  workers.push(w);
  return w;
}

async function suspendedRun(runId: string): Promise<sdk.Run> {
  return client.wait(runId, sdk.suspended, { timeoutMs: 20_000 });
}

describe("a run, from start to approval", () => {
  test("journaled step once, tool-call scope, isResuming, a falsy payload is an answer", async () => {
    const agent = agentName();
    const calls = { step: 0, asked: 0, passes: 0 };
    await worker(agent, async (input) => {
      calls.passes++;
      const ticket = await sdk.step("open-ticket", () => {
        calls.step++;
        return `T-${(input as { id: string }).id}`;
      });
      const d = sdk.toolCall("call_refund", () => {
        if (!sdk.isResuming()) calls.asked++;
        return sdk.interrupt({ message: "Refund?", metadata: { tool: "refund" } });
      });
      return { ticket, answer: d.payload ?? "none", hasPayload: d.hasPayload, approver: d.approver, info: sdk.runInfo()?.pass ?? -1 };
    });
    const run = await client.start(agent, { id: "A-1" });
    const rec = await suspendedRun(run);
    const pending = rec.pending();
    assert.equal(pending.length, 1);
    const id = sdk.interruptId(run, "call_refund", 0);
    assert.equal(pending[0]!.id, id);
    assert.equal(pending[0]!["toolCallId"], "call_refund");
    await eventually(async () => (await client.pending()).some((p) => p.runId === run && p.id === id), 15_000, "pending entry");
    const v = await client.approve(run, id, { payload: false, approver: "ada" });
    assert.equal(v.outcome, "accepted");
    assert.equal(v.replay, true);
    assert.equal(v.approver, "ada");
    const done = await client.wait(run);
    assert.equal(done.status, "completed");
    assert.deepEqual(done.result, { ticket: "T-A-1", answer: false, hasPayload: true, approver: "ada", info: 1 });
    assert.deepEqual(calls, { step: 1, asked: 1, passes: 2 });
    // The events follow the record they come from (protocol.md): a reader
    // that saw the run completed waits for its completed event.
    let types: string[] = [];
    await eventually(async () => {
      types = (await client.events(run)).map((e) => e.type);
      return types.includes("completed");
    }, 15_000, "the completed event");
    for (const t of ["suspended", "decision_accepted", "completed"]) assert.ok(types.includes(t), `${t} in ${types.join(",")}`);
    // The accepted decision that queued the replay says so (verdict.replay); no resumed entry is written.
    assert.ok(!types.includes("resumed"), `no resumed in ${types.join(",")}`);
    assert.ok(!(await client.pending()).some((p) => p.runId === run));
  });

  test("the same decision id again is a duplicate; a decision on an unknown interrupt is rejected", async () => {
    const agent = agentName();
    await worker(agent, () => ({ v: sdk.interrupt({ message: "ok?" }).payload ?? null }));
    const run = await client.start(agent);
    await suspendedRun(run);
    const id = sdk.interruptId(run, "", 0);
    await assert.rejects(
      client.approve(run, "int-000000000000000000000000"),
      (e: unknown) => e instanceof sdk.Rejected && e.verdict.code === "unknown_interrupt",
    );
    const first = await client.approve(run, id, { payload: 0, decisionId: "d-same" });
    assert.equal(first.outcome, "accepted");
    const again = await client.approve(run, id, { payload: 0, decisionId: "d-same" });
    assert.equal(again.outcome, "duplicate");
    assert.deepEqual((await client.wait(run)).result, { v: 0 });
  });
});

describe("cancellations", () => {
  test("a denial is a Cancelled with reason denied, whatever its metadata says", async () => {
    const agent = agentName();
    await worker(agent, () => {
      try {
        sdk.interrupt({ message: "Delete?" });
        return { deleted: true };
      } catch (e) {
        if (e instanceof sdk.Cancelled) return { deleted: false, reason: e.reason, comment: e.comment, by: e.approver };
        throw e;
      }
    });
    const run = await client.start(agent);
    await suspendedRun(run);
    await client.deny(run, sdk.interruptId(run, "", 0), { comment: "no", metadata: { reason: "expired" }, approver: "bob" });
    assert.deepEqual((await client.wait(run)).result, { deleted: false, reason: "denied", comment: "no", by: "bob" });
  });

  test("a deadline that passes is a Cancelled with reason expired (from the expiry's approver)", async () => {
    const agent = agentName();
    await worker(agent, () => {
      try {
        sdk.interrupt({ message: "Quick!", timeoutMs: 1000 });
        return "approved";
      } catch (e) {
        if (e instanceof sdk.Cancelled) return `${e.reason} by ${e.approver}`;
        throw e;
      }
    });
    const run = await client.start(agent);
    await suspendedRun(run);
    const done = await client.wait(run, sdk.finished, { timeoutMs: 20_000 });
    assert.equal(done.result, `expired by ${sdk.EXPIRY_APPROVER}`);
  });
});

describe("several interrupts", () => {
  test("parallel tool calls suspend together in one pass; their decisions come back by scope", async () => {
    const agent = agentName();
    await worker(agent, async () => {
      const gate = (call: string): Promise<string> =>
        sdk.toolCall(call, async () => {
          await Promise.resolve();
          const d = sdk.interrupt({ message: `run ${call}?` });
          return `${call}=${JSON.stringify(d.payload)}`;
        });
      return sdk.gather([gate("call_a"), gate("call_b")]);
    });
    const run = await client.start(agent);
    const rec = await suspendedRun(run);
    assert.deepEqual(
      rec.pending().map((i) => i.id).sort(),
      [sdk.interruptId(run, "call_a", 0), sdk.interruptId(run, "call_b", 0)].sort(),
    );
    const first = await client.approve(run, sdk.interruptId(run, "call_b", 0), { payload: "" });
    assert.equal(first.replay, false);
    const last = await client.approve(run, sdk.interruptId(run, "call_a", 0), { payload: [] });
    assert.equal(last.replay, true);
    assert.deepEqual((await client.wait(run)).result, ["call_a=[]", 'call_b=""']);
  });

  test("interrupts in sequence suspend one pass each", async () => {
    const agent = agentName();
    await worker(agent, () => {
      const a = sdk.interrupt({ message: "first?" });
      const b = sdk.interrupt({ message: "second?" });
      return [a.payload ?? null, b.payload ?? null];
    });
    const run = await client.start(agent);
    await suspendedRun(run);
    await client.approve(run, sdk.interruptId(run, "", 0), { payload: 1 });
    await client.wait(run, (r) => r.status === "suspended" && r.pass === 1);
    await client.approve(run, sdk.interruptId(run, "", 1), { payload: 2 });
    const done = await client.wait(run);
    assert.deepEqual(done.result, [1, 2]);
    assert.equal(done.pass, 2);
  });
});

describe("verdicts found in the events", () => {
  test("a decision on a run that does not exist, waited for in the events, is rejected unknown_run", async () => {
    // An inbox prefix the approver may not use: the client finds the
    // verdict in the events, where the no-run trail holds this one.
    const c = new sdk.Client(nc, { timeoutMs: 15_000, inboxPrefix: "_INBOX.other" });
    try {
      await assert.rejects(c.approve("nope-" + agentName(), "int-x", { approver: "ada" }), (e: unknown) => {
        assert.ok(e instanceof sdk.Rejected, String(e));
        assert.equal(e.verdict.code, "unknown_run");
        return true;
      });
    } finally {
      c.close();
    }
  });

  test("a retried body another decision id's rejection answered is reported rejected, not as a duplicate of the accepted one", async () => {
    const agent = agentName();
    await worker(agent, () => sdk.interrupt({ message: "ok?" }));
    const run = await client.start(agent);
    const rec = await suspendedRun(run);
    const id = rec.pending()[0]!.id;
    const decisionId = sdk.uuid7();
    await client.approve(run, id, { decisionId, payload: "A" });
    const reused = (): Promise<sdk.Verdict> => client.approve(run, id, { decisionId, payload: "B" });
    for (let attempt = 0; attempt < 2; attempt++) {
      await assert.rejects(reused(), (e: unknown) => {
        assert.ok(e instanceof sdk.Rejected, String(e));
        assert.equal(e.verdict.code, "decision_id_reused");
        return true;
      });
    }
  });
});

describe("the worker", () => {
  test("Retry runs the pass again", async () => {
    const agent = agentName();
    let attempts = 0;
    await worker(agent, () => {
      attempts++;
      if (attempts === 1) throw new sdk.Retry("not yet");
      return attempts;
    });
    const run = await client.start(agent);
    assert.equal((await client.wait(run)).result, 2);
  });

  test("an error fails the run with its message", async () => {
    const agent = agentName();
    await worker(agent, () => {
      throw new Error("the tool broke");
    });
    const run = await client.start(agent);
    const done = await client.wait(run);
    assert.equal(done.status, "failed");
    assert.equal(done.error, "the tool broke");
  });

  test("the pass timeout aborts the body's signal; on the last delivery the run fails", async () => {
    const agent = agentName();
    const reasons: unknown[] = [];
    await worker(
      agent,
      (_input, { signal }) =>
        new Promise((_, reject) => {
          signal.addEventListener("abort", () => {
            reasons.push(signal.reason);
            reject(signal.reason as Error);
          });
        }),
      { passTimeoutMs: 300, maxDeliver: 2 },
    );
    const run = await client.start(agent);
    const done = await client.wait(run);
    assert.equal(done.status, "failed");
    assert.match(done.error, /pass timed out after 300 ms \(attempt 2 of 2\)/);
    assert.equal(reasons.length, 2);
    assert.ok(reasons.every((r) => r instanceof sdk.PassTimeout));
  });

  test("a pass stopped with its worker on its item's last delivery is dead-lettered, not stranded", async () => {
    const agent = agentName();
    let started!: () => void;
    const running = new Promise<void>((ok) => (started = ok));
    const w = new sdk.Worker(nc, { logger: quiet, backoffMs: [50], maxDeliver: 1 });
    w.register(
      agent,
      (_input, { signal }) =>
        new Promise((_, reject) => {
          started();
          signal.addEventListener("abort", () => reject(signal.reason as Error));
        }),
    );
    await w.start();
    const dlq = nc.subscribe(`interlock.dlq.worker_${agent}`, { max: 1, timeout: 30_000 });
    const got = (async () => {
      for await (const m of dlq) return m;
      return undefined;
    })();
    await nc.flush();
    await client.start(agent);
    await running;
    await w.stop(100);
    const m = await got;
    assert.ok(m);
    assert.match(m.headers?.get("Interlock-Dlq-Reason") ?? "", /^gave up after 1 deliveries/);
  });

  test("a body that returns within the grace after its pass timeout has its result reported, once", async () => {
    const agent = agentName();
    let passes = 0;
    await worker(
      agent,
      async () => {
        passes++;
        await new Promise((ok) => setTimeout(ok, 400)); // past the 200 ms pass timeout, within the grace: the behaviour under test
        return "done";
      },
      { passTimeoutMs: 200, maxDeliver: 1 },
    );
    const done = await client.wait(await client.start(agent));
    assert.equal(done.status, "completed", done.error);
    assert.equal(done.result, "done");
    assert.equal(passes, 1);
  });

  test("in-progress acks keep a pass longer than the ack wait from being handed out again", async () => {
    const agent = agentName();
    let passes = 0;
    await worker(
      agent,
      async () => {
        passes++;
        await new Promise((ok) => setTimeout(ok, 2500)); // longer than the 1 s ack wait: the behaviour under test
        return passes;
      },
      { ackWaitMs: 1000 },
    );
    const run = await client.start(agent);
    assert.equal((await client.wait(run)).result, 1);
    assert.equal(passes, 1);
  });

  for (const [name, tail] of [
    ["bare", ""],
    ["with a requester", ".ada"],
    ["with a requester token the protocol refuses", ".ada@corp"],
    ["with an oversized requester token", "." + "a".repeat(129)],
  ]) {
    test(`a work item on the start subject (${name}) that is not a first pass is dead-lettered, never run`, async () => {
      const agent = agentName();
      let ran = 0;
      await worker(agent, () => ++ran);
      const dlq = nc.subscribe(`interlock.dlq.worker_${agent}`, { max: 1, timeout: 30_000 });
      const got = (async () => {
        for await (const m of dlq) return m;
        return undefined;
      })();
      await nc.flush();
      const run = "forged-" + agent;
      const work = { version: 1, runId: run, agent, pass: 1, decisions: [{ version: 1, decisionId: "d", interruptId: sdk.interruptId(run, "", 0), status: "resolved" }] };
      const h = headers();
      h.set("Nats-Msg-Id", `${run}:0:start:${sdk.nonce()}`);
      nc.publish(`interlock.start.${agent}${tail}`, JSON.stringify(work), { headers: h });
      const m = await got;
      assert.ok(m);
      assert.match(m.headers?.get("Interlock-Dlq-Reason") ?? "", /must be a first pass|requester/);
      assert.equal(m.headers?.get("Interlock-Dlq-Consumer"), `worker_${agent}`);
      assert.equal(ran, 0);
    });
  }

  test("a result nested deeper than every reader takes fails the run with the reason (it was refused, and the run never finished)", async () => {
    const agent = agentName();
    let deep: unknown = 1;
    for (let i = 0; i < sdk.MAX_DEPTH + 5; i++) deep = [deep];
    await worker(agent, () => deep);
    const run = await client.start(agent);
    const rec = await client.wait(run);
    assert.equal(rec.status, "failed");
    assert.match(rec.error, /deeper than the protocol.s 128 levels/);
  });

  test("a start with an empty journal (as left out) and a requester runs, as in Go and Python", async () => {
    const agent = agentName();
    let ran = 0;
    await worker(agent, () => ++ran);
    const run = "emptyjournal-" + agent;
    const h = headers();
    h.set("Nats-Msg-Id", `${run}:0:start:${sdk.nonce()}`);
    nc.publish(`interlock.start.${agent}.ada`, JSON.stringify({ version: 1, runId: run, agent, pass: 0, journal: {} }), { headers: h });
    assert.equal((await client.wait(run)).result, 1);
    assert.equal(ran, 1);
  });

  test("a dead letter's id carries a nonce: an id stored first by another writer of the stream loses nothing", async () => {
    const agent = agentName();
    let ran = 0;
    await worker(agent, () => ++ran);
    const jsm = await jetstreamManager(nc);
    const js = jsm.jetstream();
    // Whoever may write the dead-letter stream (another agent's worker)
    // stores first the ids the next work items would take without a nonce.
    const next = (await jsm.streams.info("INTERLOCK_WORK")).state.last_seq + 1;
    const consumer = `worker_${agent}`;
    for (let seq = next; seq < next + 20; seq++) {
      await js.publish(`interlock.dlq.${consumer}`, "squatted", { msgID: sdk.deadLetterMsgId(consumer, "INTERLOCK_WORK", seq) });
    }
    const h = headers();
    h.set("Nats-Msg-Id", `bad-${agent}:0:start:${sdk.nonce()}`);
    nc.publish(`interlock.start.${agent}`, "{not json", { headers: h });
    await eventually(async () => {
      const m = await jsm.streams.getMessage("INTERLOCK_DLQ", { last_by_subj: `interlock.dlq.${consumer}` });
      return m !== null && m.header.get("Interlock-Dlq-Consumer") === consumer && m.string() === "{not json";
    }, 15_000, "the malformed item dead-lettered, not dropped as a duplicate");
    assert.equal(ran, 0);
  });

  test("a JetStream API answer stored on a start subject (the server's headers, or no message id) is dead-lettered, never run", async () => {
    const agent = agentName();
    let ran = 0;
    await worker(agent, () => ++ran);
    const jsm = await jetstreamManager(nc);
    const consumer = `worker_${agent}`;
    const cases: [string, (h: ReturnType<typeof headers>) => void][] = [
      ["server", (h) => { h.set("Nats-Msg-Id", `srv-${agent}:0:start:${sdk.nonce()}`); h.set("Nats-Stream", "INTERLOCK_RUNS"); }],
      ["none", () => {}],
    ];
    for (const [name, set] of cases) {
      const run = `${name}-${agent}`;
      const h = headers();
      set(h);
      nc.publish(`interlock.start.${agent}`, JSON.stringify({ version: 1, runId: run, agent, pass: 0, input: {} }), { headers: h });
      await eventually(async () => {
        const m = await jsm.streams.getMessage("INTERLOCK_DLQ", { last_by_subj: `interlock.dlq.${consumer}` }).catch(() => null);
        return m !== null && m.string().includes(run) && /not a client's publish/.test(m.header.get("Interlock-Dlq-Reason"));
      }, 15_000, `the ${name} case dead-lettered`);
    }
    assert.equal(ran, 0);
  });

  test("an answer the server stored on a run's events subject (a direct get's, another user's) is not listed as an entry", async () => {
    const agent = agentName();
    await worker(agent, () => "done");
    const run = await client.start(agent);
    await client.wait(run);
    const carrier = `interlock.agui.${agent}.carrier`;
    const h = headers();
    h.set("Nats-Msg-Id", `${run}:seq999:decision_accepted`);
    h.set("Nats-Subject", `interlock.events.${run}.decision_accepted`);
    const forged = { version: 1, type: "decision_accepted", runId: run, agent, pass: 0, at: new Date().toISOString(),
      verdict: { version: 1, decisionId: "forged", runId: run, interruptId: "ask", outcome: "accepted", approver: "ada", at: new Date().toISOString() } };
    const js = (await jetstreamManager(nc)).jetstream();
    await js.publish(carrier, JSON.stringify(forged), { headers: h });
    nc.publish(`$JS.API.DIRECT.GET.INTERLOCK_AGUI.${carrier}`, "", { reply: `interlock.events.${run}.decision_accepted` });
    const jsm = await jetstreamManager(nc);
    await eventually(async () => {
      const m = await jsm.streams.getMessage("INTERLOCK_EVENTS", { last_by_subj: `interlock.events.${run}.decision_accepted` }).catch(() => null);
      return m !== null;
    }, 15_000, "the server stored its answer on the run's events subject");
    const types = (await client.events(run)).map((e) => e["type"]);
    assert.ok(types.includes("completed"), `the run's own entries are listed: ${types.join(", ")}`);
    assert.ok(!types.includes("decision_accepted"), `the answer is listed as an entry: ${types.join(", ")}`);
  });

  test("answers the server stored in the pending index (a direct get's, another user's) are not listed, and do not break the listing", async () => {
    const agent = agentName();
    const js = (await jetstreamManager(nc)).jetstream();
    const forged = { runId: `forged-${agent}`, agent, interrupt: { id: "ask", reason: "forged: call +1 555 0100" } };
    const keys = [`forged-${agent}.000000000000000000000000`, `junk-${agent}.000000000000000000000000`];
    for (const [i, body] of [JSON.stringify(forged), "\u0000 not json"].entries()) {
      const carrier = `interlock.agui.${agent}.pending${i}`;
      const h = headers();
      h.set("Nats-Msg-Id", `pending:${keys[i]}:0`);
      await js.publish(carrier, body, { headers: h });
      nc.publish(`$JS.API.DIRECT.GET.INTERLOCK_AGUI.${carrier}`, "", { reply: `$KV.interlock_pending.${keys[i]}` });
    }
    const jsm = await jetstreamManager(nc);
    await eventually(async () => {
      const got = await Promise.all(keys.map((k) =>
        jsm.streams.getMessage("KV_interlock_pending", { last_by_subj: `$KV.interlock_pending.${k}` }).catch(() => null)));
      return got.every((m) => m !== null);
    }, 15_000, "the server stored its answers in the pending index");
    const runs = (await client.pending()).map((p) => p.runId);
    assert.ok(!runs.includes(`forged-${agent}`), `the answer is listed as pending: ${runs.join(", ")}`);
  });

  test("a pull's answer stored in the pending index (on its own message's subject) is not listed", async () => {
    const agent = agentName();
    const jsm = await jetstreamManager(nc);
    const js = jsm.jetstream();
    const source = `TS_PULL_${agent}`;
    await jsm.streams.add({ name: source, subjects: [`tssrc.${agent}`] });
    try {
      await jsm.consumers.add(source, { durable_name: "puller", ack_policy: AckPolicy.Explicit });
      const key = `pulled-${agent}.000000000000000000000000`;
      const forged = { runId: `pulled-${agent}`, id: "ask", agent, suspendedAt: "2026-12-04T00:00:00Z" };
      const h = headers();
      h.set("Nats-Msg-Id", `pending:${key}:0`);
      await js.publish(`tssrc.${agent}`, JSON.stringify(forged), { headers: h });
      // The pull waits for the message (expires, not no_wait): a pull that
      // found the consumer before it saw the message was answered 404, a
      // status stored under the key, and the message never came (flaky
      // under the whole suite's load).
      nc.publish(`$JS.API.CONSUMER.MSG.NEXT.${source}.puller`, JSON.stringify({ batch: 1, expires: 10_000_000_000 }),
        { reply: `$KV.interlock_pending.${key}` });
      await eventually(async () => {
        const m = await jsm.streams.getMessage("KV_interlock_pending", { last_by_subj: `tssrc.${agent}` }).catch(() => null);
        return m !== null;
      }, 15_000, "the server stored the pull's answer in the pending index");
      const runs = (await client.pending()).map((p) => p.runId);
      assert.ok(!runs.includes(`pulled-${agent}`), `the pull's answer is listed as pending: ${runs.join(", ")}`);
    } finally {
      await jsm.streams.delete(source);
    }
  });

  test("a run record the server stored for another user (a direct get's answer) is refused, not read as the run's", async () => {
    // The second carrier says KV-Operation: DEL: its answer is no deletion
    // either (it read as a run with no record before).
    for (const op of ["", "DEL"]) {
      const agent = agentName();
      const run = `forged-${agent}`;
      const js = (await jetstreamManager(nc)).jetstream();
      const carrier = `interlock.agui.${agent}.record`;
      const h = headers();
      h.set("Nats-Msg-Id", `${carrier}:carrier`);
      if (op) h.set("KV-Operation", op);
      await js.publish(carrier, JSON.stringify({ runId: run, agent, status: "completed", pass: 0, result: "forged" }), { headers: h });
      nc.publish(`$JS.API.DIRECT.GET.INTERLOCK_AGUI.${carrier}`, "", { reply: `$KV.interlock_runs.${run}` });
      const jsm = await jetstreamManager(nc);
      await eventually(async () => {
        const m = await jsm.streams.getMessage("KV_interlock_runs", { last_by_subj: `$KV.interlock_runs.${run}` }).catch(() => null);
        return m !== null;
      }, 15_000, "the server stored its answer under the run's key");
      await assert.rejects(client.run(run), (e: unknown) => e instanceof sdk.ProtocolError && e.code === "not_allowed", `carrier op ${op}`);
    }
  });

  test("an answer whose header block nats.js will not read is refused and stepped over, not thrown", async () => {
    // nats.js throws on a header name holding a space; nats-server stores
    // the block as sent. Planted under a run's key and on another run's
    // events subject, it broke run() and events() for good (found by a
    // review of the ninth session).
    const agent = agentName();
    const run = `unreadable-${agent}`;
    await worker(agent, () => ({ v: sdk.interrupt({ message: "ok?" }).payload ?? null }));
    const other = await client.start(agent, undefined);
    await suspendedRun(other);
    const carrier = `interlock.agui.${agent}.unreadable`;
    await rawPublish(server.url, carrier, `NATS/1.0\r\nNats-Msg-Id: ${carrier}\r\nBad Name: x\r\n\r\n`, "{}");
    const jsm = await jetstreamManager(nc);
    await eventually(async () => (await jsm.streams.getMessage("INTERLOCK_AGUI", { last_by_subj: carrier }).catch(() => null)) !== null,
      15_000, "the carrier is stored");
    const before = (await client.events(other)).length;
    for (const to of [`$KV.interlock_runs.${run}`, `interlock.events.${other}.decision_accepted`]) {
      nc.publish(`$JS.API.DIRECT.GET.INTERLOCK_AGUI.${carrier}`, "", { reply: to });
    }
    await eventually(async () => {
      const m = await jsm.streams.getMessage("INTERLOCK_EVENTS", { last_by_subj: `interlock.events.${other}.decision_accepted` }).catch(() => null);
      return m !== null;
    }, 15_000, "the server stored its answer on the run's events subject");
    await eventually(async () => (await jsm.streams.getMessage("KV_interlock_runs", { last_by_subj: `$KV.interlock_runs.${run}` }).catch(() => null)) !== null,
      15_000, "the server stored its answer under the run's key");
    await assert.rejects(client.run(run), (e: unknown) => e instanceof sdk.ProtocolError && e.code === "not_allowed");
    assert.equal((await client.events(other)).length, before, "the answer is no entry of the trail");
  });

  test("a work item whose header block nats.js will not read is dead-lettered and terminated", async () => {
    // nats.js throws reading it: the worker logged the throw and never
    // acked the item, which came back after every ack wait (found by a
    // review of the ninth session).
    const agent = agentName();
    let ran = 0;
    await worker(agent, () => ++ran);
    const jsm = await jetstreamManager(nc);
    const consumer = `worker_${agent}`;
    for (const subject of [`interlock.work.${agent}`, `interlock.start.${agent}`]) {
      const run = `unreadable-${subject.split(".")[1]}-${agent}`;
      const body = JSON.stringify({ version: 1, runId: run, agent, pass: 0, input: {} });
      await rawPublish(server.url, subject, `NATS/1.0\r\nNats-Msg-Id: ${run}:0:start\r\nBad Name: x\r\n\r\n`, body);
      await eventually(async () => {
        const m = await jsm.streams.getMessage("INTERLOCK_DLQ", { last_by_subj: `interlock.dlq.${consumer}` }).catch(() => null);
        return m !== null && m.string().includes(run) && /nats\.js cannot read/.test(m.header.get("Interlock-Dlq-Reason"));
      }, 15_000, `the item on ${subject} dead-lettered`);
    }
    await eventually(async () => {
      const info = await jsm.consumers.info("INTERLOCK_WORK", consumer);
      return info.num_ack_pending === 0 && info.num_pending === 0 && info.num_redelivered === 0;
    }, 15_000, "both items terminated, none left pending or redelivered");
    assert.equal(ran, 0);
  });

  test("an answer stored under a run's key before the run starts does not stop it", async () => {
    const agent = agentName();
    const run = `planted-${agent}`;
    const js = (await jetstreamManager(nc)).jetstream();
    const carrier = `interlock.agui.${agent}.planted`;
    const h = headers();
    h.set("Nats-Msg-Id", `${carrier}:carrier`);
    await js.publish(carrier, JSON.stringify({ runId: run, agent, status: "completed", pass: 0, result: "planted" }), { headers: h });
    nc.publish(`$JS.API.DIRECT.GET.INTERLOCK_AGUI.${carrier}`, "", { reply: `$KV.interlock_runs.${run}` });
    await eventually(async () => {
      try {
        await client.run(run);
        return false;
      } catch (e) {
        return e instanceof sdk.ProtocolError && e.code === "not_allowed";
      }
    }, 15_000, "the server stored its answer under the key of a run not started yet");
    await worker(agent, () => ({ v: sdk.interrupt({ message: "ok?" }).payload ?? null }));
    assert.equal(await client.start(agent, undefined, { runId: run }), run);
    await suspendedRun(run);
    const v = await client.approve(run, sdk.interruptId(run, "", 0), { payload: 1 });
    assert.equal(v.outcome, "accepted");
    assert.deepEqual((await client.wait(run, sdk.finished, { timeoutMs: 20_000 })).result, { v: 1 });
  });

  test("a pass that keeps asking to be retried is dead-lettered on its last delivery", async () => {
    const agent = agentName();
    let attempts = 0;
    await worker(
      agent,
      () => {
        attempts++;
        throw new sdk.Retry("the model is busy");
      },
      { maxDeliver: 2 },
    );
    const dlq = nc.subscribe(`interlock.dlq.worker_${agent}`, { max: 1 });
    const got = (async () => {
      for await (const m of dlq) return m;
      return undefined;
    })();
    await nc.flush();
    await client.start(agent);
    const m = await got;
    assert.ok(m);
    assert.equal(m.headers?.get("Interlock-Dlq-Reason"), "gave up after 2 deliveries: the model is busy");
    assert.equal(m.headers.get("Interlock-Dlq-Deliveries"), "2");
    assert.equal(m.headers.get("Interlock-Dlq-Stream"), "INTERLOCK_WORK");
    assert.equal(attempts, 2);
  });

  test("a pass already reported is acked without running the body (the runs stream holds a later pass)", async () => {
    const agent = agentName();
    let passes = 0;
    await worker(agent, () => {
      passes++;
      return sdk.interrupt({}).payload ?? null;
    });
    const run = await client.start(agent);
    await suspendedRun(run);
    await client.approve(run, sdk.interruptId(run, "", 0), { payload: "yes" });
    await client.wait(run);
    assert.equal(passes, 2);
    // A second start of the same run (another nonce) is pass 0 again: the
    // runs stream's last message on the agent's subjects is pass 1's.
    await client.start(agent, undefined, { runId: run });
    const jsm = await jetstreamManager(nc);
    await eventually(async () => {
      const ci = await jsm.consumers.info("INTERLOCK_WORK", `worker_${agent}`);
      return ci.num_pending === 0 && ci.num_ack_pending === 0 && ci.delivered.consumer_seq === 3;
    }, 15_000, "the stale start acked");
    assert.equal(passes, 2);
  });

  test("stop waits for the passes under way; with a timeout it aborts them with WorkerStopping", async () => {
    const agent = agentName();
    let release!: () => void;
    const released = new Promise<void>((ok) => (release = ok));
    let started!: () => void;
    const running = new Promise<void>((ok) => (started = ok));
    const w = await worker(agent, async () => {
      started();
      await released;
      return "finished";
    });
    const run = await client.start(agent);
    await running;
    let stopped = false;
    const stopping = w.stop().then(() => (stopped = true));
    await eventually(() => (w as unknown as { stopping: boolean }).stopping, 5000, "stopping");
    assert.equal(stopped, false);
    release();
    await stopping;
    assert.equal((await client.wait(run)).result, "finished");

    const agent2 = agentName();
    let reason: unknown;
    let started2!: () => void;
    const running2 = new Promise<void>((ok) => (started2 = ok));
    const w2 = await worker(agent2, (_i, { signal }) => {
      started2();
      return new Promise((_, reject) =>
        signal.addEventListener("abort", () => {
          reason = signal.reason;
          reject(signal.reason as Error);
        }),
      );
    });
    await client.start(agent2);
    await running2;
    await w2.stop(100);
    assert.ok(reason instanceof sdk.WorkerStopping);
  });

  test("emit keeps AG-UI events once: a replay skips those earlier passes stored", async () => {
    const agent = agentName();
    await worker(agent, async () => {
      await sdk.emitText("m1", "looking");
      const d = sdk.toolCall("call_1", () => sdk.interrupt({ message: "go?" }));
      await sdk.emitToolResult("m2", "call_1", JSON.stringify(d.payload ?? null));
      return "ok";
    });
    const run = await client.start(agent);
    await suspendedRun(run);
    await client.approve(run, sdk.interruptId(run, "call_1", 0), { payload: { go: true } });
    await client.wait(run);
    const jsm = await jetstreamManager(nc);
    const subject = `interlock.agui.${agent}.${run}`;
    const info = await jsm.streams.info("INTERLOCK_AGUI", { subjects_filter: subject });
    assert.equal(info.state.subjects?.[subject], 4);
    const stream = await jsm.streams.get("INTERLOCK_AGUI");
    const last = await stream.getMessage({ last_by_subj: subject });
    assert.ok(last);
    assert.equal(last.json<{ type: string; content: string }>().content, '{"go":true}');
    assert.match(last.header.get("Nats-Msg-Id"), new RegExp(`^${run}:emit:3:[0-9a-f]{32}$`));
  });

  test("emit between interrupts decided before: on the replay every tool result is stored once", async () => {
    const agent = agentName();
    let calls = 0;
    await worker(agent, async () => {
      calls++;
      let suspended: unknown;
      for (const tool of ["a", "b"]) {
        await sdk.emit({ type: "CUSTOM", name: "call " + tool });
        try {
          sdk.toolCall(tool, () => sdk.interrupt({ message: tool + "?" }));
        } catch (e) {
          if (!(e instanceof sdk.Suspended)) throw e;
          suspended = e;
          continue;
        }
        await sdk.emit({ type: "CUSTOM", name: "result " + tool });
      }
      // The replay fails once after emitting, and is retried.
      if (calls === 2) throw new sdk.Retry("model API busy");
      if (suspended) throw suspended;
      await sdk.emit({ type: "CUSTOM", name: "done" });
      return "done";
    });
    const run = await client.start(agent);
    const rec = await suspendedRun(run);
    assert.equal(rec.pending().length, 2);
    for (const tool of ["a", "b"]) await client.approve(run, sdk.interruptId(run, tool, 0));
    assert.equal((await client.wait(run)).result, "done");

    const jsm = await jetstreamManager(nc);
    const subject = `interlock.agui.${agent}.${run}`;
    const stream = await jsm.streams.get("INTERLOCK_AGUI");
    const info = await jsm.streams.info("INTERLOCK_AGUI", { subjects_filter: subject });
    const stored: { name: string; settled: string; tentative: string }[] = [];
    for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
      const m = await stream.getMessage({ seq }).catch(() => null);
      if (!m || m.subject !== subject) continue;
      stored.push({
        name: m.json<{ name: string }>().name,
        settled: m.header.get("Interlock-Emit-Settled"),
        tentative: m.header.get("Interlock-Emit-Tentative"),
      });
    }
    assert.deepEqual(
      stored.map((e) => e.name),
      ["call a", "call b", "result a", "result b", "done"],
    );
    assert.equal(calls, 3, "the first pass, then two attempts of the replay");
    // The headers as Go's worker writes them: "call b" came after an
    // undecided interrupt, so it stays tentative until a replay places it.
    const digest = createHash("sha256").update(JSON.stringify({ type: "CUSTOM", name: "call b" })).digest("hex").slice(0, 16);
    assert.deepEqual(stored[0], { name: "call a", settled: "1", tentative: "" });
    assert.deepEqual(stored[1], { name: "call b", settled: "1", tentative: digest });
    assert.deepEqual(stored[4], { name: "done", settled: "5", tentative: "" });
  });

  test("outside a run, interrupt, step and emit throw NotInRun; isResuming is false", async () => {
    assert.throws(() => sdk.interrupt(), sdk.NotInRun);
    await assert.rejects(sdk.step("x", () => 1), sdk.NotInRun);
    await assert.rejects(sdk.emit({ type: "X" }), sdk.NotInRun);
    assert.equal(sdk.isResuming(), false);
  });
});

/** Publishes on subject a message whose header block is hdr byte for byte, over a plain protocol connection (what any user may send). */
async function rawPublish(url: string, subject: string, hdr: string, body: string): Promise<void> {
  const { hostname, port } = new URL(url.replace(/^nats:/, "http:"));
  const sock = net.connect(Number(port), hostname);
  try {
    await new Promise<void>((resolve, reject) => {
      let seen = "";
      sock.on("error", reject);
      sock.on("data", (b: Buffer) => {
        seen += b.toString();
        if (seen.includes("-ERR")) reject(new Error(`the server refused the publish: ${seen}`));
        else if (seen.includes("PONG")) resolve();
      });
      const n = Buffer.byteLength(hdr);
      sock.write(`CONNECT {"verbose":false,"pedantic":false,"headers":true,"protocol":1}\r\n`);
      sock.write(`HPUB ${subject} ${n} ${n + Buffer.byteLength(body)}\r\n${hdr}${body}\r\nPING\r\n`);
    });
  } finally {
    sock.destroy();
  }
}
