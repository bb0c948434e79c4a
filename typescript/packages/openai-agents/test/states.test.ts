/**
 * The run states against answers the server stores for another user
 * (docs/security.md): a direct get's answer carrying a forged `RunState`,
 * sent to a key of the run's (with the server's headers, or asked for
 * without them), is never resumed from. Planted beyond the run's last stop
 * it is ignored; planted over a state the run stored, the replay fails
 * naming the replaced stop, and the tool never runs with its arguments.
 * Against `interlock serve` built from this tree, with a scripted model.
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

const BUCKET = "interlock_openai_agents";

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

/** Refund calls, one per turn, by how many tool results the model has seen; then "done" with the results. */
class TurnsModel implements Model {
  constructor(private readonly amounts: number[]) {}
  getResponse(request: ModelRequest): Promise<ModelResponse> {
    const items = Array.isArray(request.input) ? request.input : [];
    const results = items
      .filter((i) => (i as { type?: string }).type === "function_call_result")
      .map((i) => JSON.stringify((i as { output?: unknown }).output));
    const amount = this.amounts[results.length];
    const output: ModelResponse["output"] =
      amount === undefined
        ? [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: `done: ${results.join(" | ")}` }] }]
        : [{ type: "function_call", callId: `call_${results.length + 1}`, name: "refund", arguments: JSON.stringify({ amount }), status: "completed" }];
    return Promise.resolve({ usage: new Usage(), output });
  }
  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<StreamEvent> {
    await Promise.resolve();
    throw new Error("the scripted model does not stream");
  }
}

/** A worker for a fresh agent asking to refund `amounts`, one per turn; the amounts its tool refunded. */
async function refunder(amounts: number[]): Promise<{ name: string; executed: number[] }> {
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
  const agent = new Agent({ name: "refunder", instructions: "Refund what is asked.", model: new TurnsModel(amounts), tools: [refund] });
  const name = agentName();
  const w = new sdk.Worker(nc, { logger: { warn: () => undefined, error: () => undefined } });
  w.register(name, openAIAgentsBody({ agent, nc }));
  await w.start();
  workers.push(w);
  return { name, executed };
}

/** What a direct get of `key` in the bucket returns: its data as text, or undefined. */
async function stored(key: string): Promise<string | undefined> {
  const m = await nc.request(`$JS.API.DIRECT.GET.KV_${BUCKET}.$KV.${BUCKET}.${key}`, "", { timeout: 2000 });
  return m.headers?.get("Nats-Sequence") ? m.string() : undefined;
}

/**
 * A run's stored state of stop 0 with its refund of 40 made call_9's of
 * 4000: a real RunState, as another agent's would be, whose approval no
 * one decided.
 */
async function forgedState(agent: string, run: string): Promise<string> {
  const real = await stored(`${agent}.${run}.0`);
  assert.ok(real !== undefined, "the run's state of stop 0 is stored");
  const forged = real.replaceAll('\\"amount\\":40}', '\\"amount\\":4000}').replaceAll('"call_1"', '"call_9"');
  assert.ok(forged.includes('\\"amount\\":4000}') && forged.includes('"call_9"'), "the state carries the call and its arguments");
  return forged;
}

/**
 * Has the server store `data` under `key` of the bucket as another user
 * would: `data` put under a key of another agent (the carrier), then a
 * direct get of it whose reply subject is `key`'s; with the server's
 * headers, or asked for without them (`bare`). Waits until `key` holds it.
 */
async function plant(key: string, data: string, bare: boolean): Promise<void> {
  const carrier = `${agentName()}.carrier.0`;
  const kv = await new Kvm(nc).open(BUCKET, { allow_direct: true });
  await kv.put(carrier, data);
  const reply = `$KV.${BUCKET}.${key}`;
  if (bare) {
    nc.publish(`$JS.API.DIRECT.GET.KV_${BUCKET}`, JSON.stringify({ last_by_subj: `$KV.${BUCKET}.${carrier}`, no_hdr: true }), { reply });
  } else {
    nc.publish(`$JS.API.DIRECT.GET.KV_${BUCKET}.$KV.${BUCKET}.${carrier}`, "", { reply });
  }
  await eventually(async () => (await stored(key)) === data, 15_000, `the server stored its answer under ${key}`);
}

/** Waits until the run has suspended on pass `pass`, or finished. */
const suspendedOn =
  (pass: number) =>
  (r: sdk.Run): boolean =>
    r.finished || (r.status === "suspended" && r.pass === pass);

test("an answer planted at the next stop's key is ignored: the run goes on from its own states, as approved", async () => {
  const { name, executed } = await refunder([40, 7]);
  const run = await client.start(name, "refund 40, then 7");
  await client.wait(run, sdk.suspended);
  await plant(`${name}.${run}.1`, await forgedState(name, run), false);

  await client.approve(run, sdk.interruptId(run, "call_1", 0));
  const rec = await client.wait(run, suspendedOn(1));
  assert.equal(rec.status, "suspended", rec.error);
  assert.deepEqual(rec.pending().map((i) => i.id), [sdk.interruptId(run, "call_2", 0)]);
  assert.deepEqual(executed, [40], "the approved call ran with its own arguments");

  await client.approve(run, sdk.interruptId(run, "call_2", 0));
  const done = await client.wait(run);
  assert.equal(done.status, "completed", done.error);
  assert.equal(typeof done.result, "string");
  assert.match(done.result as string, /^done: .*refunded 40.* \| .*refunded 7/);
  assert.deepEqual(executed, [40, 7]);
});

test("an answer planted over the run's stored state (asked for without headers) fails the replay: nothing runs from it", async () => {
  const { name, executed } = await refunder([40]);
  const run = await client.start(name, "refund 40");
  await client.wait(run, sdk.suspended);
  await plant(`${name}.${run}.0`, await forgedState(name, run), true);

  await client.approve(run, sdk.interruptId(run, "call_1", 0));
  const done = await client.wait(run, suspendedOn(1));
  assert.equal(done.status, "failed", `not failed: asked ${JSON.stringify(done.pending().map((i) => i["message"]))}`);
  assert.match(done.error, /not_allowed: openai-agents: the state kept for stop 0 of run \S+ \(key \S+\) was replaced/);
  assert.deepEqual(executed, [], "the tool never ran");
});

test("the state a replay keeps where an answer was planted is journaled: an answer planted over it fails the next replay", async () => {
  const { name, executed } = await refunder([40, 7]);
  const run = await client.start(name, "refund 40, then 7");
  await client.wait(run, sdk.suspended);
  const forged = await forgedState(name, run);
  await plant(`${name}.${run}.1`, forged, true);
  await client.approve(run, sdk.interruptId(run, "call_1", 0));
  const rec = await client.wait(run, suspendedOn(1));
  assert.equal(rec.status, "suspended", rec.error);
  assert.deepEqual(executed, [40]);

  await plant(`${name}.${run}.1`, forged, false);
  await client.approve(run, sdk.interruptId(run, "call_2", 0));
  const done = await client.wait(run, suspendedOn(2));
  assert.equal(done.status, "failed", `not failed: asked ${JSON.stringify(done.pending().map((i) => i["message"]))}`);
  assert.match(done.error, /the state kept for stop 1 of run .* was replaced/);
  assert.deepEqual(executed, [40], "neither the first call ran again nor the second ran");
});
