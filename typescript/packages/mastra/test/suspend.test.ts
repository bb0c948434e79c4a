/**
 * Mastra tool suspension (`context.agent.suspend(payload)`) through
 * Interlock, against `interlock serve` built from this tree, with a scripted
 * model (no network): the decision's payload reaches the tool as Mastra's
 * `resumeData`; a denial reaches it as a cancellation, never an answer; the
 * tool's `resumeSchema` is the question's response schema; and a generation
 * suspended in one Mastra instance resumes in a fresh one over the same
 * `LibSQLStore` file (what a resume after a process restart needs).
 */

import { strict as assert } from "node:assert";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { Mastra } from "@mastra/core";
import { Agent } from "@mastra/core/agent";
import { InMemoryStore } from "@mastra/core/storage";
import { createTool } from "@mastra/core/tools";
import { LibSQLStore } from "@mastra/libsql";
import { MockLanguageModelV4 } from "ai/test";
import { connect } from "@nats-io/transport-node";
import type { NatsConnection } from "@nats-io/nats-core";
import { z } from "zod";

import * as sdk from "@interlock/sdk";
import { approvalAgent, askResume, finishWithApprovals, isCancelled, suspensionRunId } from "../src/index.js";
import { agentName, Server } from "@interlock/testing";

// Mastra asks for Node 22.13 (.ci/run runs this suite again on Node 22).
const [major = 0, minor = 0] = process.versions.node.split(".").map(Number);
const NODE_OK = major > 22 || (major === 22 && minor >= 13);

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

describe("Mastra tool suspension through Interlock", { skip: NODE_OK ? false : "Mastra needs Node 22.13" }, () => {
  let server: Server;
  let nc: NatsConnection;
  let client: sdk.Client;
  let worker: sdk.Worker;
  let dir: string;
  const approvals = agentName();

  before(async () => {
    server = await Server.start();
    nc = await connect({ servers: server.url });
    client = new sdk.Client(nc, { timeoutMs: 20_000 });
    worker = new sdk.Worker(nc, { logger: { warn: () => undefined, error: () => undefined } });
    worker.register(approvals, approvalAgent());
    await worker.start();
    dir = mkdtempSync(join(tmpdir(), "interlock-mastra-"));
  });

  after(async () => {
    await worker.stop(1000);
    client.close();
    await nc.close();
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  /** An agent whose model asks for one refund; the tool asks for the amount (suspends) before it runs. */
  function setup(callId: string, resumed: unknown[], storage: InMemoryStore | LibSQLStore = new InMemoryStore()): Agent {
    const model = new MockLanguageModelV4({
      doGenerate: async (options) => {
        await Promise.resolve();
        const text = JSON.stringify(options.prompt);
        if (!text.includes('"tool-result"')) {
          return {
            content: [{ type: "tool-call", toolCallId: callId, toolName: "refund", input: '{"order":"A-1"}' }],
            finishReason: { unified: "tool-calls", raw: undefined },
            usage,
            warnings: [],
          };
        }
        return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
      },
    });
    const refund = createTool({
      id: "refund",
      description: "Refund an order",
      inputSchema: z.object({ order: z.string() }),
      suspendSchema: z.object({ message: z.string() }),
      resumeSchema: z.object({ amount: z.number() }).or(z.object({ __interlock__: z.literal("cancelled") }).loose()),
      execute: async (input, ctx) => {
        const data = ctx.agent?.resumeData;
        if (data === undefined) {
          await ctx.agent?.suspend({ message: `How much to refund for ${input.order}?` });
          return undefined;
        }
        resumed.push(data);
        return isCancelled(data) ? `not refunded: ${data.comment || data.reason}` : `refunded ${(data as { amount: number }).amount}`;
      },
    });
    const mastra = new Mastra({
      // Mastra's types name the model interface of its own copy of
      // @ai-sdk/provider; the mock implements the same interface.
      agents: { refunds: new Agent({ id: "refunds", name: "refunds", instructions: "Refund when asked.", model: model as never, tools: { refund } }) },
      storage,
      logger: false,
    });
    return mastra.getAgent("refunds") as Agent;
  }

  test("the decision's payload reaches the suspended tool as its resumeData", async () => {
    const callId = `${agentName()}-call`;
    const resumed: unknown[] = [];
    const agent = setup(callId, resumed);
    const first = await agent.generate("refund A-1");
    assert.equal(first.finishReason, "suspended");
    const finishing = finishWithApprovals(agent, first, { client, agent: approvals, timeoutMs: 20_000 });
    const run = suspensionRunId(callId, { message: "How much to refund for A-1?" });
    const question = (await client.wait(run, sdk.suspended)).pending()[0];
    assert.ok(question);
    assert.equal(question["message"], "How much to refund for A-1?");
    assert.equal(question["reason"], "input_required");
    const id = sdk.interruptId(run, callId, 0);
    // The tool's resumeSchema is the question's response schema: an answer that does not fit it is refused.
    await assert.rejects(client.approve(run, id, { approver: "ada", payload: { amount: "lots" } }), sdk.Rejected);
    await client.approve(run, id, { approver: "ada", payload: { amount: 35 } });
    const done = await finishing;
    assert.equal(done.text, "done");
    assert.deepEqual(resumed, [{ amount: 35 }]);
  });

  test("a denial reaches the tool as a cancellation, never an answer", async () => {
    const callId = `${agentName()}-call`;
    const resumed: unknown[] = [];
    const agent = setup(callId, resumed);
    const first = await agent.generate("refund A-1");
    const finishing = finishWithApprovals(agent, first, { client, agent: approvals, timeoutMs: 20_000 });
    const run = suspensionRunId(callId, { message: "How much to refund for A-1?" });
    await client.wait(run, sdk.suspended);
    await client.deny(run, sdk.interruptId(run, callId, 0), { approver: "ada", comment: "not eligible" });
    await finishing;
    assert.equal(resumed.length, 1);
    assert.ok(isCancelled(resumed[0]));
    assert.deepEqual(resumed[0], { __interlock__: "cancelled", reason: "denied", comment: "not eligible", approver: "ada" });
  });

  test("after a restart: a fresh Mastra over the same LibSQL file resumes the tool with the decision made meanwhile", async () => {
    const callId = `${agentName()}-call`;
    const url = `file:${join(dir, "mastra.db")}`;
    const before: unknown[] = [];
    const first = await setup(callId, before, new LibSQLStore({ id: "before", url })).generate("refund A-1");
    assert.equal(first.finishReason, "suspended");
    // The first process asks, then stops before the decision.
    const run = suspensionRunId(callId, { message: "How much to refund for A-1?" });
    const p = first.suspendPayload as { toolCallId: string; toolName: string; args: unknown; suspendPayload: unknown; resumeSchema: unknown };
    const gaveUp = await askResume(client, p, { agent: approvals, timeoutMs: 1 });
    assert.ok(isCancelled(gaveUp) && gaveUp.reason === "timeout");
    await client.wait(run, sdk.suspended);
    await client.approve(run, sdk.interruptId(run, callId, 0), { approver: "ada", payload: { amount: 0 } });

    // The restarted process: a new Mastra instance and store on the same
    // file, the suspended output's run id and payload, no question asked again.
    const after: unknown[] = [];
    const agent = setup(callId, after, new LibSQLStore({ id: "after", url }));
    const done = await finishWithApprovals(agent, { finishReason: first.finishReason, runId: first.runId, suspendPayload: first.suspendPayload }, {
      client,
      agent: approvals,
      timeoutMs: 20_000,
    });
    assert.equal(done.text, "done");
    assert.deepEqual(after, [{ amount: 0 }], "a falsy answer is an answer");
    assert.equal((await client.events(run)).filter((e) => e.type === "suspended").length, 1, "asked once");
  });
});
