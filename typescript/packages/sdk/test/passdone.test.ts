/**
 * The worker's check before a pass (has this pass reported?) with a late
 * notice: the coordinator publishes an expiry's notice, about the pass that
 * waited, after it queued the replay, so the replay's completion can be
 * stored first. A redelivered replay then found the notice last, a pass
 * before its own, and ran a second time; it is done, its outcome is there.
 */

import { strict as assert } from "node:assert";
import { after, before, test } from "node:test";

import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { headers, type NatsConnection } from "@nats-io/nats-core";

import * as sdk from "../src/index.js";
import { agentName, Server } from "@interlock/testing";

let server: Server;
let nc: NatsConnection;

before(async () => {
  server = await Server.start();
  nc = await connect({ servers: server.url });
});

after(async () => {
  await nc.close();
  await server.stop();
});

/** The worker's private check, as a worker that took the work item calls it. */
function passDone(w: sdk.Worker, work: Record<string, unknown>, want: number, key: string): Promise<boolean> {
  const inner = w as unknown as { passDone(work: unknown, want: number, key: string): Promise<boolean> };
  return inner.passDone(work, want, key);
}

test("a late notice about the pass that waited does not hide a reported replay", async () => {
  const agent = agentName();
  const run = "late-notice-1";
  const key = "the-pass-key";
  const js = jetstream(nc);
  const w = new sdk.Worker(nc);
  const work = { agent, runId: run, pass: 1 };
  assert.equal(await passDone(w, work, 1, key), false);
  const h = headers();
  h.set("Nats-Msg-Id", sdk.outcomeMsgId(run, 1, key));
  await js.publish(`interlock.completed.${agent}.${run}`, JSON.stringify({ version: 1, runId: run, agent, pass: 1, result: 1 }), {
    headers: h,
  });
  assert.equal(await passDone(w, work, 1, key), true);
  await js.publish(`interlock.expired.${agent}.${run}`, JSON.stringify({ version: 1, runId: run, agent, pass: 0, kind: "expired" }));
  assert.equal(await passDone(w, work, 1, key), true, "a late notice hides nothing");
  assert.equal(await passDone(w, { ...work, pass: 2 }, 2, key), false, "a later pass is not done behind it");
});
