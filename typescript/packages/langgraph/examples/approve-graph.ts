/**
 * A LangGraph.js graph on Interlock: a node asks a person before it
 * refunds, through LangGraph's own `interrupt()`; the question waits in
 * JetStream, and any worker resumes the graph with the decision.
 *
 *   go run ./cmd/interlock serve --data-dir /tmp/interlock-data &     # NATS on 127.0.0.1:4222 + coordinator
 *   cd typescript && npm ci && npm run example -w @interlock/langgraph  # prints the approve command
 *   go run ./cmd/interlock approve <run> --payload '{"amount": 35}'   # in another terminal
 */

import { Annotation, END, interrupt, START, StateGraph } from "@langchain/langgraph";
import { connect } from "@nats-io/transport-node";

import { Client, step, suspended, Worker } from "@interlock/sdk";
import { isCancelled, langGraphAgent } from "../src/index.js";

const Refund = Annotation.Root({
  order: Annotation<string>(),
  amount: Annotation<number>(),
  outcome: Annotation<string>(),
});

/** The graph: look the order up (once per run), then ask before refunding. */
export const refundGraph = new StateGraph(Refund)
  .addNode("look_up", async (s) => ({ amount: await step("look-up-order", () => s.amount) }))
  .addNode("refund", (s) => {
    const answer: unknown = interrupt(
      { message: `Refund ${s.amount.toFixed(2)} for order ${s.order}?` },
      { responseSchema: { type: "object", required: ["amount"] } },
    );
    if (isCancelled(answer)) return { outcome: `not refunded (${answer.comment || answer.reason})` };
    return { outcome: `refunded ${(answer as { amount: number }).amount}` };
  })
  .addEdge(START, "look_up")
  .addEdge("look_up", "refund")
  .addEdge("refund", END);

async function main(): Promise<void> {
  const nc = await connect({ servers: process.env["NATS_URL"] ?? "nats://127.0.0.1:4222" });
  const worker = new Worker(nc);
  worker.register("ts_langgraph_refunds", langGraphAgent(refundGraph));
  const client = new Client(nc);
  await worker.start();
  try {
    const run = await client.start("ts_langgraph_refunds", { order: "A-1", amount: 40 });
    await client.wait(run, suspended);
    console.log(`run ${run} waits for a decision:`);
    console.log(`  interlock approve ${run} --payload '{"amount": 35}'`);
    console.log(`  interlock deny ${run} --comment 'not eligible'`);
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
