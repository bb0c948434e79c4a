/**
 * Across languages with Python, against one `interlock serve`: a run started
 * and decided from the Python SDK whose agent is a TypeScript worker, and a
 * run started and decided from TypeScript whose agent is a Python worker
 * (test/python/peer.py). The interrupt ids, payloads (falsy ones included)
 * and cancellations each side sees are the other's.
 *
 * The Python side runs with $INTERLOCK_PYTHON, else CI's venv
 * (/tmp/interlock-py, which .ci/run makes before the TypeScript checks),
 * else python3: one that imports `interlock` and `nats`. Without one, the
 * tests are skipped, saying so; with INTERLOCK_REQUIRE_PYTHON=1 (.ci/run)
 * they fail instead.
 */

import { strict as assert } from "node:assert";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { connect } from "@nats-io/transport-node";
import type { NatsConnection } from "@nats-io/nats-core";

import * as sdk from "../src/index.js";
import { agentName, REPO, Script, Server } from "@interlock/testing";

// The script is beside this file's source (test/python), not copied into .test-build.
const PEER = join(REPO, "typescript", "packages", "sdk", "test", "python", "peer.py");

function findPython(): { python?: string; why: string } {
  const candidates = [process.env["INTERLOCK_PYTHON"], "/tmp/interlock-py/bin/python", "python3"].filter((p): p is string => !!p);
  const tried: string[] = [];
  for (const p of candidates) {
    if (p.includes("/") && !existsSync(p)) {
      tried.push(`${p}: not there`);
      continue;
    }
    try {
      execFileSync(p, ["-c", "import interlock, nats"], { stdio: "ignore", timeout: 30_000 });
      return { python: p, why: "" };
    } catch {
      tried.push(`${p}: cannot import interlock and nats`);
    }
  }
  return {
    why: `no Python with the interlock SDK (pip install -e ./python into a venv, then INTERLOCK_PYTHON=<venv>/bin/python): ${tried.join("; ")}`,
  };
}

const { python, why } = findPython();
const REQUIRED = process.env["INTERLOCK_REQUIRE_PYTHON"] === "1";

test("a Python with the interlock SDK is there when INTERLOCK_REQUIRE_PYTHON=1", { skip: REQUIRED ? false : "not required" }, () => {
  assert.ok(python, why);
});

describe("across languages with Python", { skip: python ? false : why }, () => {
  let server: Server;
  let nc: NatsConnection;
  let client: sdk.Client;

  before(async () => {
    server = await Server.start();
    nc = await connect({ servers: server.url });
    client = new sdk.Client(nc, { timeoutMs: 30_000 });
  });

  after(async () => {
    client.close();
    await nc.close();
    await server.stop();
  });

  test("a run started and decided from Python whose agent is a TypeScript worker", async () => {
    const agent = agentName();
    const worker = new sdk.Worker(nc, { logger: { warn: () => undefined, error: () => undefined } });
    worker.register(agent, (input) =>
      sdk.toolCall("call_refund", () => {
        const order = input as { order: string; amount: number };
        const d = sdk.interrupt({ message: `Refund ${order.amount} for ${order.order}?` });
        return { refunded: true, payload: d.payload ?? null, hasPayload: d.hasPayload, by: d.approver, comment: d.comment, language: "typescript" };
      }),
    );
    await worker.start();
    const peer = new Script(python!, [PEER, "client", agent], { NATS_URL: server.url });
    try {
      assert.equal(await peer.exited, 0, peer.output);
      const out = JSON.parse(peer.output.trim().split("\n").pop()!) as { run: string; interrupt: string; message: string; status: string; result: unknown };
      assert.equal(out.interrupt, sdk.interruptId(out.run, "call_refund", 0), "Python and TypeScript derive the same interrupt id");
      assert.equal(out.message, "Refund 40 for A-1?");
      assert.equal(out.status, "completed");
      assert.deepEqual(out.result, { refunded: true, payload: 0, hasPayload: true, by: "py-ada", comment: "from Python", language: "typescript" });
      assert.equal((await client.run(out.run)).status, "completed");
    } finally {
      peer.kill();
      await worker.stop(1000);
    }
  });

  test("runs started and decided from TypeScript whose agent is a Python worker", async () => {
    const agent = agentName();
    const peer = new Script(python!, [PEER, "worker", agent], { NATS_URL: server.url }, { stdin: true });
    try {
      await peer.waitFor(/^ready$/m);
      const approved = await client.start(agent, { order: "A-1", amount: 40 });
      const denied = await client.start(agent, { order: "A-2", amount: 5 });
      for (const run of [approved, denied]) {
        const pending = (await client.wait(run, sdk.suspended)).pending()[0];
        assert.equal(pending?.["id"], sdk.interruptId(run, "call_refund", 0), "the Python worker's interrupt id is the one TypeScript derives");
      }
      await client.deny(denied, sdk.interruptId(denied, "call_refund", 0), { approver: "ts-ada", comment: "too small" });
      await client.approve(approved, sdk.interruptId(approved, "call_refund", 0), { approver: "ts-ada", payload: false });
      assert.deepEqual((await client.wait(approved)).result, { refunded: true, payload: false, by: "ts-ada", language: "python" });
      assert.deepEqual((await client.wait(denied)).result, { refunded: false, reason: "denied", comment: "too small", by: "ts-ada" });
      peer.endInput();
      assert.equal(await peer.exited, 0);
    } finally {
      peer.kill();
    }
  });
});
