/**
 * A sample agent for `interlock serve`: it opens a ticket once (a journaled
 * step), tells a person on the suspend pass only, asks before it refunds,
 * and takes the amount the approver decides.
 *
 *   go run ./cmd/interlock serve --data-dir /tmp/interlock-data &   # NATS on 127.0.0.1:4222 + coordinator
 *   cd typescript && npm ci && npm run example                       # a worker and one run; prints the approve command
 *   go run ./cmd/interlock approve <run> --payload '{"amount": 35}' # in another terminal
 */

import { connect } from "@nats-io/transport-node";

import {
  Cancelled,
  Client,
  interrupt,
  isResuming,
  step,
  suspended,
  toolCall,
  Worker,
  type JsonObject,
  type JsonValue,
} from "../src/index.js";

interface Order {
  id: string;
  amount: number;
}

/** The agent body: one pass of a run; it runs again from the top on every replay. */
export async function refundAgent(input: JsonValue | undefined): Promise<JsonValue> {
  const order = input as unknown as Order;
  // Journaled: runs on the first pass; every replay gets the recorded result.
  const ticket = await step("open-ticket", () => `T-${order.id}`);
  return toolCall("call_issue_refund", (): JsonObject => {
    if (!isResuming()) {
      console.log(`asking a person to approve the refund for ${order.id} (once, on the suspend pass)`);
    }
    try {
      const d = interrupt({
        message: `Refund ${order.amount.toFixed(2)} for order ${order.id}?`,
        responseSchema: { type: "object", required: ["amount"] },
      });
      const answer = d.payload as { amount: number };
      return { refunded: true, amount: answer.amount, ticket, approver: d.approver };
    } catch (e) {
      // A denial or an expiry: never an approval.
      if (e instanceof Cancelled) return { refunded: false, ticket, why: e.comment || e.reason };
      throw e;
    }
  });
}

async function main(): Promise<void> {
  const nc = await connect({ servers: process.env["NATS_URL"] ?? "nats://127.0.0.1:4222" });
  const agent = process.env["INTERLOCK_AGENT"] ?? "ts_refunds";
  const worker = new Worker(nc);
  worker.register(agent, refundAgent);
  const client = new Client(nc);
  await worker.start();
  try {
    const run = await client.start(agent, { id: "A-1", amount: 40 });
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
