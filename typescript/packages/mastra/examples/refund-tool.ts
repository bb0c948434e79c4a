/**
 * Mastra on Interlock: a tool that suspends (`context.agent.suspend`) to
 * ask a person how much to refund; the question is an Interlock run, and
 * the decision's payload comes back as the tool's `resumeData`. It runs
 * offline with a scripted model; give the agent a real one to use it for
 * real, and a persistent store (`LibSQLStore` of `@mastra/libsql` on a
 * file) to resume after a restart.
 *
 *   go run ./cmd/interlock serve --data-dir /tmp/interlock-data &   # NATS on 127.0.0.1:4222 + coordinator
 *   cd typescript && npm ci && npm run example -w @interlock/mastra  # Node 22.13+; prints the approve command
 *   go run ./cmd/interlock approve <run> --payload '{"amount": 35}' # in another terminal
 */

import { Mastra } from "@mastra/core";
import { Agent } from "@mastra/core/agent";
import { InMemoryStore } from "@mastra/core/storage";
import { createTool } from "@mastra/core/tools";
import { MockLanguageModelV4 } from "ai/test";
import { connect } from "@nats-io/transport-node";
import { z } from "zod";

import { Client, suspended, Worker } from "@interlock/sdk";
import { approvalAgent, finishWithApprovals, isCancelled, suspensionRunId } from "../src/index.js";

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

/** A model that calls the refund tool once, then reports what it said. */
export function refundModel(callId: string): MockLanguageModelV4 {
  return new MockLanguageModelV4({
    doGenerate: (options) => {
      const results = options.prompt.flatMap((m) => (m.role === "tool" ? m.content : []));
      if (results.length === 0) {
        return Promise.resolve({
          content: [{ type: "tool-call", toolCallId: callId, toolName: "refund", input: '{"order":"A-1"}' }],
          finishReason: { unified: "tool-calls", raw: undefined },
          usage,
          warnings: [],
        });
      }
      const text = results.map((r) => (r.type === "tool-result" ? JSON.stringify(r.output) : "")).join("; ");
      return Promise.resolve({ content: [{ type: "text", text }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] });
    },
  });
}

/** The tool: asks a person for the amount (suspends), then refunds it; a denial refunds nothing. */
export const refund = createTool({
  id: "refund",
  description: "Refund an order",
  inputSchema: z.object({ order: z.string() }),
  suspendSchema: z.object({ message: z.string() }),
  resumeSchema: z.object({ amount: z.number() }).or(z.object({ __interlock__: z.literal("cancelled") }).loose()),
  execute: async ({ order }, ctx) => {
    const answer = ctx.agent?.resumeData;
    if (answer === undefined) {
      await ctx.agent?.suspend({ message: `How much should order ${order} get back?` });
      return undefined;
    }
    if (isCancelled(answer)) return `no refund for ${order}: ${answer.comment || answer.reason}`;
    return `refunded ${(answer as { amount: number }).amount} for ${order}`;
  },
});

async function main(): Promise<void> {
  const nc = await connect({ servers: process.env["NATS_URL"] ?? "nats://127.0.0.1:4222" });
  const approvals = process.env["INTERLOCK_AGENT"] ?? "mastra_approvals";
  const callId = process.env["CALL_ID"] ?? `call-${Date.now().toString(36)}`; // tool call ids are the model's; this one's is fixed
  const worker = new Worker(nc);
  worker.register(approvals, approvalAgent()); // the questions' agent
  const client = new Client(nc);
  await worker.start();
  try {
    const mastra = new Mastra({
      // Mastra's types name the model interface of its own copy of @ai-sdk/provider; the mock implements it.
      agents: { refunds: new Agent({ id: "refunds", name: "refunds", instructions: "Refund when asked.", model: refundModel(callId) as never, tools: { refund } }) },
      storage: new InMemoryStore(),
      logger: false,
    });
    const agent = mastra.getAgent("refunds");
    const first = await agent.generate("Please refund order A-1.");
    const finishing = finishWithApprovals(agent, first, { client, agent: approvals, timeoutMs: 3_600_000 });
    const run = suspensionRunId(callId, { message: "How much should order A-1 get back?" });
    const question = (await client.wait(run, suspended, { timeoutMs: 60_000 })).pending()[0];
    console.log(`${question?.["message"] as string} (run ${run}) waits for a decision:`);
    console.log(`  interlock approve ${run} --payload '{"amount": 35}'`);
    console.log(`  interlock deny ${run} --comment 'not eligible'`);
    const out = await finishing;
    console.log(`done: ${out.text}`);
  } finally {
    await worker.stop();
    client.close();
    await nc.close();
  }
}

if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) {
  await main();
}
