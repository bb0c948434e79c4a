/**
 * Across languages: the TypeScript example's worker decided with the Go
 * client (the interlock CLI), and a run the Go CLI starts run by a
 * TypeScript worker.
 */

import { strict as assert } from "node:assert";
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";

import { Server, agentName } from "@interlock/testing";

let server: Server;

before(async () => {
  server = await Server.start();
});

after(async () => {
  await server.stop();
});

test("the example prints the approve command; the Go CLI's approval completes the TypeScript worker's run", async () => {
  const example = join(dirname(fileURLToPath(import.meta.url)), "..", "examples", "refund-agent.js");
  const agent = agentName();
  const proc = spawn(process.execPath, [example], {
    env: { ...process.env, NATS_URL: server.url, INTERLOCK_AGENT: agent },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const exited = new Promise<number | null>((ok) => proc.once("exit", ok));
  let out = "";
  const lines: string[] = [];
  let onLine: (() => void) | undefined;
  proc.stdout.setEncoding("utf8");
  proc.stdout.on("data", (chunk: string) => {
    out += chunk;
    lines.push(...chunk.split("\n"));
    onLine?.();
  });
  const waitFor = (re: RegExp): Promise<RegExpMatchArray> =>
    new Promise((ok, fail) => {
      const timer = setTimeout(() => fail(new Error(`no ${String(re)} in:\n${out}`)), 60_000);
      const check = (): void => {
        const m = re.exec(out);
        if (m) {
          clearTimeout(timer);
          onLine = undefined;
          ok(m);
        }
      };
      onLine = check;
      check();
    });
  try {
    const m = await waitFor(/interlock approve (\S+) --payload '\{"amount": 35\}'/);
    const run = m[1]!;
    assert.match(out, /asking a person to approve the refund for A-1 \(once, on the suspend pass\)/);
    server.cli("approve", run, "--payload", '{"amount": 35}', "--approver", "ada");
    await waitFor(/completed: /);
    assert.match(out, /completed: \{"refunded":true,"amount":35,"ticket":"T-A-1","approver":"ada"\}/);
    assert.equal((out.match(/asking a person/g) ?? []).length, 1, "asked once, on the suspend pass only");
    assert.equal(await exited, 0);
  } finally {
    proc.kill();
  }
});

test("a run the Go CLI starts is run by a TypeScript worker; the Go CLI's denial reaches the body as Cancelled", async () => {
  const { connect } = await import("@nats-io/transport-node");
  const sdk = await import("../src/index.js");
  const nc = await connect({ servers: server.url });
  const agent = agentName();
  const worker = new sdk.Worker(nc, { logger: { warn: () => undefined, error: () => undefined } });
  worker.register(agent, (input) => {
    try {
      const d = sdk.interrupt({ message: `go ahead with ${JSON.stringify(input)}?`, approvers: ["ada"] });
      return { approved: d.payload ?? null };
    } catch (e) {
      if (e instanceof sdk.Cancelled) return { approved: false, reason: e.reason, comment: e.comment, by: e.approver };
      throw e;
    }
  });
  await worker.start();
  const client = new sdk.Client(nc);
  try {
    const run = "go-started-" + agent;
    // (The CLI runs synchronously here, so it must not wait on this process's worker.)
    assert.equal(server.cli("start", agent, "--input", '{"n": 2}', "--run-id", run).trim(), run);
    const pending = (await client.wait(run, sdk.suspended)).pending()[0];
    assert.ok(pending);
    assert.equal(pending["message"], 'go ahead with {"n":2}?');
    assert.deepEqual(pending["approvers"], ["ada"]);
    server.cli("deny", run, "--approver", "ada", "--comment", "not today");
    const done = await client.wait(run);
    assert.deepEqual(done.result, { approved: false, reason: "denied", comment: "not today", by: "ada" });
  } finally {
    await worker.stop(1000);
    client.close();
    await nc.close();
  }
});
