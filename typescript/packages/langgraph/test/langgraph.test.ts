/**
 * The LangGraph.js adapter against `interlock serve` built from this tree,
 * with scripted graphs (no model, no network).
 */

import { strict as assert } from "node:assert";
import { after, before, test } from "node:test";

import { Annotation, END, interrupt, START, StateGraph } from "@langchain/langgraph";
import { connect } from "@nats-io/transport-node";
import type { NatsConnection } from "@nats-io/nats-core";

import * as sdk from "@interlock/sdk";
import { isCancelled, langGraphAgent } from "../src/index.js";
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

async function serve(agent: string, body: sdk.AgentBody): Promise<void> {
  const w = new sdk.Worker(nc, { logger: { warn: () => undefined, error: () => undefined } });
  w.register(agent, body);
  await w.start();
  workers.push(w);
}

const State = Annotation.Root({
  log: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
});

test("parallel branches suspend together; a node's interrupts in sequence; decisions resume the graph in the order it asked", async () => {
  const agent = agentName();
  const looked = { n: 0 };
  const graph = new StateGraph(State)
    .addNode("refund", async () => {
      const order = await sdk.step("look-up", () => {
        looked.n++;
        return "A-1";
      });
      const answer: unknown = interrupt({ question: `refund ${order}?` }, { responseSchema: { type: "boolean" } });
      return { log: [`refund:${JSON.stringify(answer)}`] };
    })
    .addNode("email", () => ({ log: [`email:${JSON.stringify(interrupt("send the email?"))}`] }))
    .addNode("confirm", () => {
      const first: unknown = interrupt("first check?");
      const second: unknown = interrupt("second check?");
      return { log: [`confirm:${JSON.stringify(first)},${JSON.stringify(second)}`] };
    })
    .addEdge(START, "refund")
    .addEdge(START, "email")
    .addEdge("refund", "confirm")
    .addEdge("email", "confirm")
    .addEdge("confirm", END);
  await serve(agent, langGraphAgent(graph));
  const run = await client.start(agent, { log: [] });

  let rec = await client.wait(run, sdk.suspended);
  const stop1 = rec.pending();
  assert.equal(stop1.length, 2, "both branches' interrupts in one suspension");
  // Ordered by task (path, then name), whichever branch finished first.
  const [email, refund] = [sdk.interruptId(run, "", 0), sdk.interruptId(run, "", 1)];
  const byId = new Map(stop1.map((i) => [i.id, i]));
  assert.equal(byId.get(refund)?.["message"], "refund A-1?");
  assert.deepEqual(byId.get(refund)?.["responseSchema"], { type: "boolean" });
  assert.equal(byId.get(email)?.["message"], "send the email?");
  await client.approve(run, email, { payload: 0 });
  await client.approve(run, refund, { payload: false });

  rec = await client.wait(run, (r) => r.status === "suspended" && r.pass === 1);
  assert.deepEqual(rec.pending().map((i) => i.message), ["first check?"]);
  await client.approve(run, sdk.interruptId(run, "", 2)); // no payload: true
  rec = await client.wait(run, (r) => r.status === "suspended" && r.pass === 2);
  assert.deepEqual(rec.pending().map((i) => i.message), ["second check?"]);
  await client.approve(run, sdk.interruptId(run, "", 3), { payload: "" });

  const done = await client.wait(run);
  assert.equal(done.status, "completed", done.error);
  const log = (done.result as { log: string[] }).log;
  assert.deepEqual([...log.slice(0, 2)].sort(), ["email:0", "refund:false"], "the parallel branches' writes");
  assert.deepEqual(log.slice(2), ['confirm:true,""']);
  assert.equal(looked.n, 1, "a step in a node runs once per run");
});

test("a denial reaches the node as a cancelled answer, never an approval", async () => {
  const agent = agentName();
  const graph = new StateGraph(State)
    .addNode("act", () => {
      const answer: unknown = interrupt("delete everything?");
      if (isCancelled(answer)) return { log: [`not done: ${answer.reason} by ${answer.approver}: ${answer.comment}`] };
      return { log: ["done"] };
    })
    .addEdge(START, "act")
    .addEdge("act", END);
  await serve(agent, langGraphAgent(graph));
  const run = await client.start(agent, {});
  await client.wait(run, sdk.suspended);
  await client.deny(run, sdk.interruptId(run, "", 0), { approver: "ada", comment: "no", metadata: { reason: "expired" } });
  const done = await client.wait(run);
  assert.deepEqual(done.result, { log: ["not done: denied by ada: no"] });
});

test("the example graph: the approver's amount reaches the node; its look-up runs once", async () => {
  const { refundGraph } = await import("../examples/approve-graph.js");
  const agent = agentName();
  await serve(agent, langGraphAgent(refundGraph));
  const run = await client.start(agent, { order: "A-1", amount: 40 });
  const rec = await client.wait(run, sdk.suspended);
  assert.deepEqual(rec.pending().map((i) => i.message), ["Refund 40.00 for order A-1?"]);
  server.cli("approve", run, "--payload", '{"amount": 35}');
  const done = await client.wait(run);
  assert.deepEqual(done.result, { order: "A-1", amount: 40, outcome: "refunded 35" });
  assert.deepEqual(done.raw["journal"], { "/look-up-order#0": 40 });
});
