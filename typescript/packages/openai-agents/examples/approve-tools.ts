/**
 * The OpenAI Agents SDK on Interlock: a tool with `needsApproval` waits on
 * an Interlock decision, its RunState kept in JetStream KV. This example
 * runs offline with a scripted model; give the agent a real one
 * (`@openai/agents-openai`, `model: "gpt-4.1"`) to use it for real.
 *
 *   go run ./cmd/interlock serve --data-dir /tmp/interlock-data &          # NATS on 127.0.0.1:4222 + coordinator
 *   cd typescript && npm ci && npm run example -w @interlock/openai-agents   # prints the approve command
 *   go run ./cmd/interlock approve <run> <interrupt>                       # in another terminal
 */

import { Agent, tool, Usage, type Model, type ModelRequest, type ModelResponse, type StreamEvent } from "@openai/agents-core";
import { connect } from "@nats-io/transport-node";
import { z } from "zod";

import { Client, interruptId, suspended, Worker } from "@interlock/sdk";
import { openAIAgentsBody } from "../src/index.js";

/** A model that asks for one refund, then reports what the tool said. */
export class RefundModel implements Model {
  getResponse(request: ModelRequest): Promise<ModelResponse> {
    const items = Array.isArray(request.input) ? request.input : [];
    const result = items.find((i) => (i as { type?: string }).type === "function_call_result");
    const output: ModelResponse["output"] = result
      ? [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: `Done: ${JSON.stringify((result as { output?: unknown }).output)}` }] }]
      : [{ type: "function_call", callId: "call_refund_1", name: "refund", arguments: '{"order":"A-1","amount":40}', status: "completed" }];
    return Promise.resolve({ usage: new Usage(), output });
  }
  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<StreamEvent> {
    await Promise.resolve();
    throw new Error("the example model does not stream");
  }
}

/** The agent: one tool, which needs a person's approval. */
export const refundAgent = new Agent({
  name: "refunds",
  instructions: "Refund orders when asked.",
  model: new RefundModel(),
  tools: [
    tool({
      name: "refund",
      description: "Refund an order",
      parameters: z.object({ order: z.string(), amount: z.number() }),
      needsApproval: true,
      execute: ({ order, amount }) => `refunded ${amount} for ${order}`,
    }),
  ],
});

async function main(): Promise<void> {
  const nc = await connect({ servers: process.env["NATS_URL"] ?? "nats://127.0.0.1:4222" });
  const worker = new Worker(nc);
  worker.register("ts_openai_refunds", openAIAgentsBody({ agent: refundAgent, nc }));
  const client = new Client(nc);
  await worker.start();
  try {
    const run = await client.start("ts_openai_refunds", "Please refund order A-1 (40.00).");
    await client.wait(run, suspended);
    const id = interruptId(run, "call_refund_1", 0);
    console.log(`run ${run} waits for a decision:`);
    console.log(`  interlock approve ${run} ${id}`);
    console.log(`  interlock deny ${run} ${id} --comment 'not eligible'`);
    const rec = await client.wait(run, undefined, { timeoutMs: 3_600_000 });
    console.log(`${rec.status}: ${JSON.stringify(rec.status === "completed" ? rec.result : rec.error)}`);
  } finally {
    await worker.stop();
    client.close();
    await nc.close();
  }
}

if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) {
  await main();
}
