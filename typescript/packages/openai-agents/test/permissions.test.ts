/**
 * The adapter under the shipped per-agent permissions (deploy/nats/auth.conf,
 * loaded by `interlock serve --nats-config deploy/nats/single.conf`, the
 * bucket made by `interlock provision` as admin): agent `refunds` keeps its
 * run states in `interlock_openai_agents` under keys of its own, agent
 * `billing` can neither read nor overwrite them, and the states are deleted
 * once the run finishes.
 */

import { strict as assert } from "node:assert";
import { after, before, test } from "node:test";

import { Agent, tool, Usage, type Model, type ModelRequest, type ModelResponse, type StreamEvent } from "@openai/agents-core";
import { type NatsConnection } from "@nats-io/nats-core";
import { Kvm } from "@nats-io/kv";
import { z } from "zod";

import * as sdk from "@interlock/sdk";
import { openAIAgentsBody } from "../src/index.js";
import { eventually, Shipped } from "@interlock/testing";

let shipped: Shipped;
const as = (user: string): Promise<NatsConnection> => shipped.as(user);

before(async () => {
  shipped = await Shipped.start();
});

after(async () => {
  await shipped.stop();
});

/** One tool call needing approval, then the answer with its result. */
class OneCallModel implements Model {
  getResponse(request: ModelRequest): Promise<ModelResponse> {
    const items = Array.isArray(request.input) ? request.input : [];
    const result = items.find((i) => (i as { type?: string }).type === "function_call_result");
    const output: ModelResponse["output"] = result
      ? [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "done" }] }]
      : [{ type: "function_call", callId: "call_1", name: "refund", arguments: '{"amount":40}', status: "completed" }];
    return Promise.resolve({ usage: new Usage(), output });
  }
  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<StreamEvent> {
    await Promise.resolve();
    throw new Error("the scripted model does not stream");
  }
}

test("the run state under auth.conf: the agent's own keys, out of another agent's reach, deleted when the run ends", async () => {
  const agentNc = await as("AGENT");
  const refund = tool({
    name: "refund",
    description: "Refund an amount",
    parameters: z.object({ amount: z.number() }),
    needsApproval: true,
    execute: ({ amount }) => `refunded ${amount}`,
  });
  const agent = new Agent({ name: "refunder", instructions: "Refund.", model: new OneCallModel(), tools: [refund] });
  const worker = new sdk.Worker(agentNc, {
    inboxPrefix: "_INBOX.agent",
    createConsumers: false,
    logger: { warn: () => undefined, error: () => undefined },
  });
  // No inboxPrefix: the adapter takes the connection's own (_INBOX.agent).
  worker.register("refunds", openAIAgentsBody({ agent, nc: agentNc }));
  await worker.start();
  try {
    const starter = new sdk.Client(agentNc, { inboxPrefix: "_INBOX.agent" });
    const run = await starter.start("refunds", "refund A-1");
    const auditor = new sdk.Client(await as("AUDITOR"), { inboxPrefix: "_INBOX.auditor" });
    await auditor.wait(run, sdk.suspended);

    // The state is under the agent's own key; agent billing can neither
    // read it nor write beside it.
    const key = `refunds.${run}.0`;
    const own = await new Kvm(agentNc).open("interlock_openai_agents", { allow_direct: true });
    assert.equal((await own.get(key))?.operation, "PUT");
    const billing = await as("AGENT_BILLING");
    const other = await new Kvm(billing).open("interlock_openai_agents", { allow_direct: true, timeout: 2000 });
    await assert.rejects(other.get(key));
    await assert.rejects(other.put(key, "forged"));

    const ada = new sdk.Client(await as("ADA"), { inboxPrefix: "_INBOX.ada" });
    await ada.approve(run, sdk.interruptId(run, "call_1", 0), { approver: "ada" });
    const done = await auditor.wait(run);
    assert.equal(done.status, "completed", done.error);
    assert.equal(done.result, "done");
    // Deleted once the completion is recorded.
    await eventually(async () => (await own.get(key))?.operation !== "PUT", 15_000, "the state deleted after the run completed");
    for (const c of [starter, auditor, ada]) c.close();
  } finally {
    await worker.stop(1000);
  }
});
