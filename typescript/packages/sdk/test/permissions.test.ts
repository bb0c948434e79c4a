/**
 * The SDK under the shipped per-role permissions (deploy/nats/auth.conf,
 * loaded by `interlock serve --nats-config deploy/nats/single.conf`): the
 * worker as agent `refunds`'s own user (its consumer, outcomes, AG-UI events
 * and direct gets only), the approver as `ada` (deciding only as herself,
 * verdicts in her own inbox), the reads as `auditor`.
 */

import { strict as assert } from "node:assert";
import { after, before, test } from "node:test";

import type { NatsConnection } from "@nats-io/nats-core";

import * as sdk from "../src/index.js";
import { eventually, Shipped } from "@interlock/testing";

let shipped: Shipped;
const as = (user: string): Promise<NatsConnection> => shipped.as(user);

before(async () => {
  shipped = await Shipped.start();
});

after(async () => {
  await shipped.stop();
});

test("a worker as the agent's own user, an approver as herself and an auditor's reads, under auth.conf", async () => {
  const agentNc = await as("AGENT");
  const worker = new sdk.Worker(agentNc, {
    inboxPrefix: "_INBOX.agent",
    createConsumers: false,
    logger: { warn: () => undefined, error: () => undefined },
  });
  worker.register("refunds", async () => {
    await sdk.emitText("m1", "checking the order");
    const d = sdk.toolCall("call_refund", () => sdk.interrupt({ message: "Refund 40?", approvers: ["ada"] }));
    await sdk.emitToolResult("m2", "call_refund", "done");
    return { refunded: d.payload ?? null, by: d.approver };
  });
  await worker.start();
  try {
    const starter = new sdk.Client(agentNc, { inboxPrefix: "_INBOX.agent" });
    const run = await starter.start("refunds", { order: "A-1" });

    const auditor = new sdk.Client(await as("AUDITOR"), { inboxPrefix: "_INBOX.auditor" });
    await auditor.wait(run, sdk.suspended);
    const id = sdk.interruptId(run, "call_refund", 0);
    assert.ok((await auditor.pending()).some((p) => p.runId === run && p.id === id));

    const ada = new sdk.Client(await as("ADA"), { inboxPrefix: "_INBOX.ada" });
    const v = await ada.approve(run, id, { payload: 35, approver: "ada" });
    assert.equal(v.outcome, "accepted");
    assert.equal(v.approver, "ada");

    const done = await auditor.wait(run);
    assert.equal(done.status, "completed", done.error);
    assert.deepEqual(done.result, { refunded: 35, by: "ada" });
    // The completed event follows the record (protocol.md): wait for it.
    let types: string[] = [];
    await eventually(async () => {
      types = (await auditor.events(run)).map((e) => e.type);
      return types.includes("completed");
    }, 15_000, "the completed event");
    assert.ok(types.includes("decision_accepted") && types.includes("completed"), types.join(","));
    for (const c of [starter, auditor, ada]) c.close();
  } finally {
    await worker.stop(1000);
  }
});
