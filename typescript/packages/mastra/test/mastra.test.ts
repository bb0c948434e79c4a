/**
 * The Mastra adapter against `interlock serve` built from this tree, with a
 * scripted model (the AI SDK's `MockLanguageModelV4`, no network): a tool
 * with `requireApproval` runs once approved through Interlock and never
 * when declined, the decline's reason reaching the model.
 */

import { strict as assert } from "node:assert";
import { after, before, describe, test } from "node:test";

import { Mastra } from "@mastra/core";
import { Agent } from "@mastra/core/agent";
import { InMemoryStore } from "@mastra/core/storage";
import { createTool } from "@mastra/core/tools";
import { MockLanguageModelV4 } from "ai/test";
import { connect } from "@nats-io/transport-node";
import type { NatsConnection } from "@nats-io/nats-core";
import { z } from "zod";

import * as sdk from "@interlock/sdk";
import { approvalAgent, approvalRunId, finishWithApprovals } from "../src/index.js";
import { agentName, Server } from "@interlock/testing";

// Mastra asks for Node 22.13 (.ci/run runs this suite again on Node 22).
const [major = 0, minor = 0] = process.versions.node.split(".").map(Number);
const NODE_OK = major > 22 || (major === 22 && minor >= 13);

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

describe("the Mastra adapter", { skip: NODE_OK ? false : "Mastra needs Node 22.13" }, () => {
  let server: Server;
  let nc: NatsConnection;
  let client: sdk.Client;
  let worker: sdk.Worker;
  const approvals = agentName();

  before(async () => {
    server = await Server.start();
    nc = await connect({ servers: server.url });
    client = new sdk.Client(nc, { timeoutMs: 20_000 });
    worker = new sdk.Worker(nc, { logger: { warn: () => undefined, error: () => undefined } });
    worker.register(approvals, approvalAgent());
    await worker.start();
  });

  after(async () => {
    await worker.stop(1000);
    client.close();
    await nc.close();
    await server.stop();
  });

  function setup(callId: string, executed: number[], seen: string[]) {
    const model = new MockLanguageModelV4({
      doGenerate: async (options) => {
        await Promise.resolve();
        const text = JSON.stringify(options.prompt);
        if (!text.includes('"tool-result"')) {
          return {
            content: [{ type: "tool-call", toolCallId: callId, toolName: "refund", input: '{"amount":40}' }],
            finishReason: { unified: "tool-calls", raw: undefined },
            usage,
            warnings: [],
          };
        }
        seen.push(text);
        return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
      },
    });
    const refund = createTool({
      id: "refund",
      description: "Refund an amount",
      inputSchema: z.object({ amount: z.number() }),
      requireApproval: true,
      execute: (input) => {
        executed.push(input.amount);
        return Promise.resolve(`refunded ${input.amount}`);
      },
    });
    const mastra = new Mastra({
      // Mastra's types name the model interface of its own copy of
      // @ai-sdk/provider; the mock implements the same interface.
      agents: { refunds: new Agent({ id: "refunds", name: "refunds", instructions: "Refund when asked.", model: model as never, tools: { refund } }) },
      storage: new InMemoryStore(),
      logger: false,
    });
    return mastra.getAgent("refunds") as Agent;
  }

  test("approved through Interlock, the tool runs", async () => {
    const callId = `${agentName()}-call`;
    const executed: number[] = [];
    const agent = setup(callId, executed, []);
    const first = await agent.generate("refund A-1");
    assert.equal(first.finishReason, "suspended");
    const finishing = finishWithApprovals(agent, first, { client, agent: approvals, timeoutMs: 20_000 });
    const run = approvalRunId(callId);
    const question = (await client.wait(run, sdk.suspended)).pending()[0];
    assert.equal(question?.["message"], 'Run refund({"amount":40})?');
    await client.approve(run, sdk.interruptId(run, callId, 0), { approver: "ada" });
    const done = await finishing;
    assert.equal(done.text, "done");
    assert.deepEqual(executed, [40]);
  });

  test("declined through Interlock, the tool never runs and the model gets the reason", async () => {
    const callId = `${agentName()}-call`;
    const executed: number[] = [];
    const seen: string[] = [];
    const agent = setup(callId, executed, seen);
    const first = await agent.generate("refund A-1");
    const finishing = finishWithApprovals(agent, first, { client, agent: approvals, timeoutMs: 20_000 });
    const run = approvalRunId(callId);
    await client.wait(run, sdk.suspended);
    await client.deny(run, sdk.interruptId(run, callId, 0), { approver: "ada", comment: "over the limit" });
    const done = await finishing;
    assert.equal(done.text, "done");
    assert.deepEqual(executed, []);
    assert.match(seen.join(""), /over the limit/);
  });
});
