/**
 * The OpenAI Agents SDK adapter against `interlock serve` built from this
 * tree, with a scripted model (no network): parallel approvals of one turn
 * in one suspension, approved and rejected in one pass; a second turn's
 * approval after the first; the model is called once per turn, whatever
 * the passes.
 */

import { strict as assert } from "node:assert";
import { after, before, test } from "node:test";

import { Agent, tool, Usage, type Model, type ModelRequest, type ModelResponse, type StreamEvent } from "@openai/agents-core";
import { connect } from "@nats-io/transport-node";
import type { NatsConnection } from "@nats-io/nats-core";
import { Kvm } from "@nats-io/kv";
import { z } from "zod";

import * as sdk from "@interlock/sdk";
import { openAIAgentsBody } from "../src/index.js";
import { agentName, eventually, Server } from "@interlock/testing";

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

type Output = ModelResponse["output"];

/** A model that answers from a script, one response per call, by how many tool results it has seen. */
class ScriptedModel implements Model {
  calls = 0;
  constructor(private readonly script: ((results: string[]) => Output)[]) {}
  getResponse(request: ModelRequest): Promise<ModelResponse> {
    this.calls++;
    const items = Array.isArray(request.input) ? request.input : [];
    const results = items
      .filter((i) => (i as { type?: string }).type === "function_call_result")
      .map((i) => JSON.stringify((i as { output?: unknown }).output));
    const turns = items.filter((i) => (i as { type?: string }).type === "function_call").length;
    const step = this.script[Math.min(turns === 0 ? 0 : turns === 2 ? 1 : 2, this.script.length - 1)]!;
    return Promise.resolve({ usage: new Usage(), output: step(results) });
  }
  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<StreamEvent> {
    await Promise.resolve();
    throw new Error("the scripted model does not stream");
  }
}

const call = (callId: string, amount: number): Output[number] => ({
  type: "function_call",
  callId,
  name: "refund",
  arguments: JSON.stringify({ amount }),
  status: "completed",
});
const say = (text: string): Output[number] => ({
  type: "message",
  role: "assistant",
  status: "completed",
  content: [{ type: "output_text", text }],
});

test("parallel approvals in one suspension, approved and rejected in one pass; a later turn's approval; one model call per turn", async () => {
  const executed: number[] = [];
  const refund = tool({
    name: "refund",
    description: "Refund an amount",
    parameters: z.object({ amount: z.number() }),
    needsApproval: true,
    execute: ({ amount }) => {
      executed.push(amount);
      return `refunded ${amount}`;
    },
  });
  const model = new ScriptedModel([
    () => [call("call_a", 40), call("call_b", 5)],
    () => [call("call_c", 1)],
    (results) => [say(`done: ${results.join(" | ")}`)],
  ]);
  const agent = new Agent({ name: "refunder", instructions: "Refund what is asked.", model, tools: [refund] });
  const name = agentName();
  const w = new sdk.Worker(nc, { logger: { warn: () => undefined, error: () => undefined } });
  w.register(name, openAIAgentsBody({ agent, nc }));
  await w.start();
  workers.push(w);

  const run = await client.start(name, "refund A-1 and A-2");
  let rec = await client.wait(run, sdk.suspended);
  const a = sdk.interruptId(run, "call_a", 0);
  const b = sdk.interruptId(run, "call_b", 0);
  assert.deepEqual(rec.pending().map((i) => i.id).sort(), [a, b].sort(), "the turn's two approvals in one suspension");
  assert.equal(rec.pending().find((i) => i.id === a)?.["message"], 'Run refund({"amount":40})?');
  assert.equal(model.calls, 1);

  await client.deny(run, b, { comment: "not eligible", approver: "ada" });
  await client.approve(run, a, { approver: "ada" });
  rec = await client.wait(run, (r) => r.status === "suspended" && r.pass === 1);
  assert.deepEqual(rec.pending().map((i) => i.id), [sdk.interruptId(run, "call_c", 0)]);
  assert.deepEqual(executed, [40], "the approved call ran, the rejected one did not");

  await client.approve(run, sdk.interruptId(run, "call_c", 0));
  const done = await client.wait(run);
  assert.equal(done.status, "completed", done.error);
  assert.equal(typeof done.result, "string");
  const text = done.result as string;
  assert.match(text, /^done: /);
  assert.match(text, /refunded 40/);
  assert.match(text, /not eligible/);
  assert.match(text, /refunded 1/);
  assert.deepEqual(executed, [40, 1]);
  assert.equal(model.calls, 3, "one model call per turn: a replay resumes the stored state");
  // Each stop's state was kept under the agent's own keys, and is deleted
  // once the completion is stored.
  const states = await new Kvm(nc).open("interlock_openai_agents", { allow_direct: true });
  for (const stop of [0, 1]) {
    await eventually(
      async () => (await states.get(`${name}.${run}.${stop}`))?.operation === "DEL",
      15_000,
      `stop ${stop}'s state deleted`,
    );
  }
});

test("the example agent: a denial with the Go CLI reaches the model as the rejection text", async () => {
  const { refundAgent } = await import("../examples/approve-tools.js");
  const name = agentName();
  const w = new sdk.Worker(nc, { logger: { warn: () => undefined, error: () => undefined } });
  w.register(name, openAIAgentsBody({ agent: refundAgent, nc }));
  await w.start();
  workers.push(w);
  const run = await client.start(name, "Please refund order A-1.");
  await client.wait(run, sdk.suspended);
  server.cli("deny", run, sdk.interruptId(run, "call_refund_1", 0), "--comment", "not eligible");
  const done = await client.wait(run);
  assert.equal(done.result, 'Done: {"type":"text","text":"not eligible"}');
});
