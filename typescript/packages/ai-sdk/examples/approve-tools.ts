/**
 * The Vercel AI SDK on Interlock: `generateText` with a tool approval
 * function whose questions are Interlock runs. The scripted model makes two
 * parallel refund calls in one step; the middleware asks about both at
 * once, and they may be decided in any order. It runs offline; give
 * `wrapLanguageModel` a real model (`openai("gpt-4.1")`) to use it for real.
 *
 *   go run ./cmd/interlock serve --data-dir /tmp/interlock-data &   # NATS on 127.0.0.1:4222 + coordinator
 *   cd typescript && npm ci && npm run example -w @interlock/ai-sdk  # Node 22; prints the approve commands
 *   go run ./cmd/interlock approve <run>                           # in another terminal, once per question
 */

import { generateText, stepCountIs, tool, wrapLanguageModel } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { connect } from "@nats-io/transport-node";
import { z } from "zod";

import { Client, suspended, Worker } from "@interlock/sdk";
import { approvalAgent, approvalRunId, interlockApprovalMiddleware, interlockToolApproval } from "../src/index.js";

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

/** A model that refunds two orders in one step (parallel tool calls), then reports what the tools said. */
export function refundModel(prefix: string): MockLanguageModelV4 {
  return new MockLanguageModelV4({
    doGenerate: (options) => {
      const results = options.prompt.flatMap((m) => (m.role === "tool" ? m.content : []));
      if (results.length === 0) {
        return Promise.resolve({
          content: [
            { type: "tool-call", toolCallId: `${prefix}-A-1`, toolName: "refund", input: '{"order":"A-1","amount":40}' },
            { type: "tool-call", toolCallId: `${prefix}-A-2`, toolName: "refund", input: '{"order":"A-2","amount":5}' },
          ],
          finishReason: { unified: "tool-calls", raw: undefined },
          usage,
          warnings: [],
        });
      }
      const text = results.map((r) => (r.type === "tool-result" ? `${r.toolCallId}: ${JSON.stringify(r.output)}` : "")).join("; ");
      return Promise.resolve({ content: [{ type: "text", text }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] });
    },
  });
}

async function main(): Promise<void> {
  const nc = await connect({ servers: process.env["NATS_URL"] ?? "nats://127.0.0.1:4222" });
  const agent = process.env["INTERLOCK_AGENT"] ?? "ai_sdk_approvals";
  const prefix = process.env["CALL_PREFIX"] ?? `call-${Date.now().toString(36)}`; // tool call ids are the model's; this one's are fixed
  const worker = new Worker(nc);
  worker.register(agent, approvalAgent()); // the questions' agent
  const client = new Client(nc);
  await worker.start();
  try {
    const generating = generateText({
      model: wrapLanguageModel({ model: refundModel(prefix), middleware: interlockApprovalMiddleware({ client, agent }) }),
      prompt: "Refund orders A-1 (40.00) and A-2 (5.00).",
      tools: {
        refund: tool({
          description: "Refund an order",
          inputSchema: z.object({ order: z.string(), amount: z.number() }),
          execute: ({ order, amount }) => `refunded ${amount} for ${order}`,
        }),
      },
      toolApproval: interlockToolApproval({ client, agent, timeoutMs: 3_600_000 }),
      stopWhen: stepCountIs(3),
    });
    for (const order of ["A-1", "A-2"]) {
      const run = approvalRunId(`${prefix}-${order}`);
      const question = (await client.wait(run, suspended, { timeoutMs: 60_000 })).pending()[0];
      console.log(`${question?.["message"] as string} waits for a decision:`);
      console.log(`  interlock approve ${run}`);
      console.log(`  interlock deny ${run} --comment 'not eligible'`);
    }
    const result = await generating;
    console.log(`done: ${result.text}`);
  } finally {
    await worker.stop();
    client.close();
    await nc.close();
  }
}

if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) {
  await main();
}
