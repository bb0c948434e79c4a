/**
 * Decision policies (protocol version 2) end to end, against `interlock
 * serve` built from this tree: a quorum of votes with the requester
 * excluded, votes bound to the call's digest, the replay's check of the
 * approved call, every vote and the execution key on the replay.
 */

import { strict as assert } from "node:assert";
import { after, before, describe, test } from "node:test";

import { connect } from "@nats-io/transport-node";
import type { NatsConnection } from "@nats-io/nats-core";

import * as sdk from "../src/index.js";
import { agentName, Server } from "@interlock/testing";

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

async function worker(agent: string, body: sdk.AgentBody): Promise<void> {
  const w = new sdk.Worker(nc, { logger: quiet, backoffMs: [50] });
  w.register(agent, body);
  await w.start();
  workers.push(w);
}

const REFUND = { order: "A-1001", amount: 42.5 };

const refundRequest = (args: sdk.JsonObject): sdk.Request => ({
  message: "Refund?",
  approvers: ["ada", "bob", "cy"],
  call: { tool: "issue_refund", arguments: args },
  policy: { approvals: 2 },
});

async function rejectedWith(p: Promise<unknown>, code: string): Promise<void> {
  await assert.rejects(p, (e: unknown) => e instanceof sdk.Rejected && e.verdict.code === code);
}

describe("decision policies", () => {
  test("two of three, the requester excluded, one vote per person, votes bound to the call", async () => {
    const agent = agentName();
    await worker(agent, () =>
      sdk.toolCall("call_1", () => {
        const d = sdk.interrupt(refundRequest(REFUND));
        return {
          key: sdk.executionKey(),
          digest: d.callDigest,
          votes: d.votes.map((v) => ({ approver: v.approver, at: v.at, status: v.status })),
        };
      }),
    );
    const run = await client.start(agent, {}, { requester: "ada" });
    const rec = await client.wait(run, sdk.suspended, { timeoutMs: 20_000 });
    assert.equal(rec.raw["requester"], "ada");
    const pending = rec.pending()[0]!;
    const digest = (pending["call"] as sdk.JsonObject)["digest"] as string;
    assert.equal(digest, sdk.callDigest("issue_refund", REFUND));
    const id = pending.id;

    await rejectedWith(client.approve(run, id, { approver: "ada", callDigest: digest }), "requester_excluded");
    const v = await client.approve(run, id, { approver: "bob", callDigest: digest });
    assert.equal(v.outcome, "vote_recorded");
    assert.ok(v.tally);
    assert.deepEqual([v.tally.approvals, v.tally.approvalsNeeded], [1, 2]);
    assert.ok(v.tally.waitingOn.includes("cy"));
    await rejectedWith(client.approve(run, id, { approver: "bob", callDigest: digest }), "already_voted");
    const stale = sdk.callDigest("issue_refund", { order: "A-1001", amount: 4250 });
    await rejectedWith(client.approve(run, id, { approver: "cy", callDigest: stale }), "call_mismatch");
    assert.equal((await client.approve(run, id, { approver: "cy", callDigest: digest })).outcome, "accepted");

    const done = await client.wait(run, sdk.finished, { timeoutMs: 20_000 });
    assert.equal(done.status, "completed", done.error);
    const out = done.result as { key: string; digest: string; votes: { approver: string; at: string; status: string }[] };
    assert.equal(out.digest, digest);
    assert.match(out.key, /^[0-9a-f]{64}$/);
    assert.deepEqual(
      out.votes.map((x) => x.approver),
      ["bob", "cy"],
    );
    assert.ok(out.votes.every((x) => x.at !== "" && x.status === "resolved"));
  });

  test("a replay that would run another call fails closed", async () => {
    const agent = agentName();
    await worker(agent, (_input, { run }) =>
      sdk.toolCall("call_1", () => {
        const args = run.pass === 0 ? REFUND : { order: "A-1001", amount: 4250 };
        sdk.interrupt({ call: { tool: "issue_refund", arguments: args } });
        return "refunded";
      }),
    );
    const run = await client.start(agent, {});
    const rec = await client.wait(run, sdk.suspended, { timeoutMs: 20_000 });
    assert.equal((await client.approve(run, rec.pending()[0]!.id, { approver: "bob" })).outcome, "accepted");
    const done = await client.wait(run, sdk.finished, { timeoutMs: 20_000 });
    assert.equal(done.status, "failed");
    assert.match(done.error, /call differs from the approved call/);
  });
});
