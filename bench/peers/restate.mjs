// The Restate driver of the peer comparison (bench/peers), on Node 22 with
// the published @restatedev/restate-sdk: a service whose handler creates an
// awakeable, records that it asked (a journaled step), waits for the
// awakeable, and returns the answer. The driver serves the handler itself,
// registers it with the restate-server the runner started, and decides each
// run by resolving its awakeable through the ingress. It speaks the
// runner's protocol (bench/peers/protocol.go).
import * as restate from "@restatedev/restate-sdk";
import { createInterface } from "node:readline";
import { performance } from "node:perf_hooks";

const env = (k) => {
  const v = process.env[k];
  if (v === undefined) throw new Error(`${k} is not set`);
  return v;
};
const WARMUP = Number(env("PEERS_WARMUP"));
const CYCLES = Number(env("PEERS_CYCLES"));
const RESUMES = Number(env("PEERS_RESUMES"));
const CONCURRENCY = Number(env("PEERS_CONCURRENCY"));
const INGRESS = env("RESTATE_INGRESS");
const ADMIN = env("RESTATE_ADMIN");
const PORT = Number(env("PEERS_ENDPOINT_PORT"));

const asked = new Map(); // run -> resolve(awakeable id)
const resumedAt = new Map(); // run -> performance.now() when the handler ran again

const approval = restate.service({
  name: "approval",
  handlers: {
    run: async (ctx, run) => {
      const { id, promise } = ctx.awakeable();
      await ctx.run("ask", () => "asked");
      asked.get(run)?.(id);
      const answer = await promise;
      resumedAt.set(run, performance.now());
      return answer;
    },
  },
});

await restate.serve({ services: [approval], port: PORT });
const reg = await fetch(`${ADMIN}/deployments`, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ uri: `http://127.0.0.1:${PORT}` }),
});
if (!reg.ok) throw new Error(`registering the deployment: ${reg.status} ${await reg.text()}`);

async function cycle(run) {
  const askedId = new Promise((resolve) => asked.set(run, resolve));
  const call = fetch(`${INGRESS}/approval/run`, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": run },
    body: JSON.stringify(run),
  });
  let waiting = true;
  const endedEarly = call.then((r) => {
    if (waiting) throw new Error(`the call ended before asking: ${r.status}`);
  });
  const id = await Promise.race([askedId, endedEarly]);
  waiting = false;
  endedEarly.catch(() => {});
  asked.delete(run);
  const decided = performance.now();
  const res = await fetch(`${INGRESS}/restate/awakeables/${id}/resolve`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify("yes"),
  });
  if (!res.ok) throw new Error(`resolve: ${res.status} ${await res.text()}`);
  await res.arrayBuffer();
  const done = await call;
  const body = await done.json();
  if (!done.ok || body !== "yes") throw new Error(`completion: ${done.status} ${JSON.stringify(body)}`);
  const ran = resumedAt.get(run);
  resumedAt.delete(run);
  return ran - decided;
}

let seq = 0;
const next = () => `p${String(++seq).padStart(7, "0")}-${process.pid}`;

async function batch(n) {
  const ids = Array.from({ length: n }, next);
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (ids.length > 0) await cycle(ids.pop());
    }),
  );
}

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function mark(name) {
  process.stdout.write(`MARK ${name}\n`);
  await lines.next();
}

await batch(WARMUP);
await mark("start");
await batch(CYCLES);
await mark("end");
for (let i = 0; i < RESUMES; i++) {
  const ms = await cycle(next());
  process.stdout.write(`RESUME ${Math.round(ms * 1000)}\n`);
}
process.stdout.write("DONE\n");
process.exit(0);
