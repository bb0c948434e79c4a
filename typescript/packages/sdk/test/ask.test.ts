/**
 * One round trip for a settled gate (protocol version 2), end to end against
 * `interlock serve --policies` built from this tree: a worker with
 * `askRules` asks before suspending, and an operator rule's approval lets the
 * pass go on with no suspension and no replay; a rule's denial throws
 * Cancelled in the same pass; with no rule the pass suspends as usual. The
 * ask bodies are held to testdata/conformance/ask.json.
 */

import { strict as assert } from "node:assert";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { connect } from "@nats-io/transport-node";
import type { NatsConnection } from "@nats-io/nats-core";

import * as sdk from "../src/index.js";
import { askMessage, takeAskReply } from "../src/wire.js";
import { agentName, REPO, Server } from "@interlock/testing";

interface AskVectors {
  requests: { name: string; runId: string; agent: string; pass: number; requester: string; interrupt: sdk.JsonObject; body: sdk.JsonObject }[];
  replies: { name: string; interruptId: string; reply?: sdk.JsonObject; raw?: string; takes: boolean }[];
  journalKeys: { interruptId: string; key: string }[];
}

const ASK = JSON.parse(readFileSync(join(REPO, "testdata", "conformance", "ask.json"), "utf8")) as AskVectors;

const POLICIES = `
rules:
  - name: small-refunds
    match: 'tool == "issue_refund" && arguments.amount < 20'
    action: approve
  - name: no-wires
    match: 'tool == "wire"'
    action: deny
`;

describe("ask vectors", () => {
  for (const v of ASK.requests) {
    test(`request: ${v.name}`, () => {
      assert.deepEqual(askMessage(v.runId, v.agent, v.pass, v.requester, v.interrupt), v.body);
    });
  }
  for (const v of ASK.replies) {
    test(`reply: ${v.name}`, () => {
      const raw = v.raw ?? JSON.stringify(v.reply);
      const got = takeAskReply(new TextEncoder().encode(raw), v.interruptId);
      assert.equal(got !== undefined, v.takes);
      if (got) assert.deepEqual(got, (JSON.parse(raw) as sdk.JsonObject)["decision"]);
    });
  }
  test("journal keys", () => {
    assert.ok(ASK.journalKeys.length > 0);
    for (const v of ASK.journalKeys) assert.equal(sdk.askKey(v.interruptId), v.key);
  });
});

const quiet: sdk.Logger = { warn: () => undefined, error: () => undefined };

describe("one round trip for a settled gate", () => {
  let ruled: Server;
  let plain: Server;
  let rnc: NatsConnection;
  let pnc: NatsConnection;
  let client: sdk.Client;
  let plainClient: sdk.Client;
  const workers: sdk.Worker[] = [];

  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), "interlock-ts-ask-"));
    writeFileSync(join(dir, "policies.yaml"), POLICIES);
    [ruled, plain] = await Promise.all([Server.start({ args: ["--policies", join(dir, "policies.yaml")] }), Server.start()]);
    rnc = await connect({ servers: ruled.url });
    pnc = await connect({ servers: plain.url });
    client = new sdk.Client(rnc, { timeoutMs: 20_000 });
    plainClient = new sdk.Client(pnc, { timeoutMs: 20_000 });
  });

  after(async () => {
    for (const w of workers) await w.stop(1000);
    client.close();
    plainClient.close();
    await rnc.close();
    await pnc.close();
    await Promise.all([ruled.stop(), plain.stop()]);
  });

  async function asking(nc: NatsConnection, agent: string, tool: string, args: sdk.JsonObject, passes: number[]): Promise<void> {
    const w = new sdk.Worker(nc, { logger: quiet, backoffMs: [50], askRules: true });
    w.register(agent, () => {
      passes.push(sdk.runInfo()!.pass);
      return sdk.toolCall("call_1", async () => {
        try {
          const d = await sdk.interruptAsync({ message: "Go?", call: { tool, arguments: args } });
          return { by: d.approver, rule: d.rule, key: sdk.executionKey() };
        } catch (e) {
          if (e instanceof sdk.Cancelled) return { cancelled: true, by: e.decision.approver, rule: e.decision.rule };
          throw e;
        }
      });
    });
    await w.start();
    workers.push(w);
  }

  test("a rule's approval: the pass goes on, no suspension, no replay", async () => {
    const agent = agentName();
    const passes: number[] = [];
    await asking(rnc, agent, "issue_refund", { amount: 5 }, passes);
    const run = await client.start(agent, {});
    const rec = await client.wait(run, undefined, { timeoutMs: 20_000 });
    assert.equal(rec.status, "completed", rec.error);
    assert.equal(rec.pass, 0, "settled without a suspension and a replay");
    assert.deepEqual(passes, [0]);
    const out = rec.result as sdk.JsonObject;
    assert.equal(out["by"], sdk.POLICY_APPROVER);
    assert.equal(out["rule"], "small-refunds");
    assert.equal((out["key"] as string).length, 64);
    const events = await client.events(run);
    assert.ok(!events.some((e) => e.type === "suspended"));
    assert.ok(
      events.some((e) => {
        const v = e["verdict"] as sdk.JsonObject | undefined;
        return e.type === "decision_accepted" && v?.["approver"] === sdk.POLICY_APPROVER && v["rule"] === "small-refunds";
      }),
      "the rule's decision is in the audit trail",
    );
  });

  test("a rule's denial: Cancelled in the same pass", async () => {
    const agent = agentName();
    const passes: number[] = [];
    await asking(rnc, agent, "wire", { amount: 5 }, passes);
    const run = await client.start(agent, {});
    const rec = await client.wait(run, undefined, { timeoutMs: 20_000 });
    assert.equal(rec.status, "completed", rec.error);
    assert.equal(rec.pass, 0);
    assert.deepEqual(passes, [0]);
    assert.deepEqual(rec.result, { cancelled: true, by: sdk.POLICY_APPROVER, rule: "no-wires" });
    assert.ok(!(await client.events(run)).some((e) => e.type === "suspended"));
  });

  test("no rule: the pass suspends as usual and the replay gets the person's decision", async () => {
    const agent = agentName();
    const passes: number[] = [];
    await asking(rnc, agent, "issue_refund", { amount: 500 }, passes);
    const run = await client.start(agent, {});
    let rec = await client.wait(run, sdk.suspended, { timeoutMs: 20_000 });
    assert.equal(rec.status, "suspended", rec.error);
    const pending = rec.pending()[0]!;
    await client.approve(run, pending.id, { approver: "ada", callDigest: (pending["call"] as sdk.JsonObject)["digest"] as string });
    rec = await client.wait(run, undefined, { timeoutMs: 20_000 });
    assert.equal(rec.status, "completed", rec.error);
    assert.equal(rec.pass, 1);
    assert.deepEqual(passes, [0, 1]);
    assert.equal((rec.result as sdk.JsonObject)["by"], "ada");
  });

  test("the replay reuses the journaled decision, in the synchronous interrupt() too", async () => {
    const agent = agentName();
    const passes: number[] = [];
    const resuming: boolean[] = [];
    const w = new sdk.Worker(rnc, { logger: quiet, backoffMs: [50], askRules: true });
    w.register(agent, async () => {
      const pass = sdk.runInfo()!.pass;
      passes.push(pass);
      const small: sdk.Request = { message: "5?", call: { tool: "issue_refund", arguments: { amount: 5 } } };
      const first = await sdk.toolCall("small", () => {
        resuming.push(sdk.isResuming());
        return pass > 0 ? sdk.interrupt(small) : sdk.interruptAsync(small);
      });
      const second = await sdk.toolCall("big", () =>
        sdk.interruptAsync({ message: "500?", call: { tool: "issue_refund", arguments: { amount: 500 } } }),
      );
      return [first.approver, second.approver];
    });
    await w.start();
    workers.push(w);
    const run = await client.start(agent, {});
    let rec = await client.wait(run, sdk.suspended, { timeoutMs: 20_000 });
    assert.equal(rec.status, "suspended", rec.error);
    const pending = rec.pending();
    assert.equal(pending.length, 1);
    assert.equal(pending[0]!["toolCallId"], "big");
    await client.approve(run, pending[0]!.id, { approver: "ada", callDigest: (pending[0]!["call"] as sdk.JsonObject)["digest"] as string });
    rec = await client.wait(run, undefined, { timeoutMs: 20_000 });
    assert.equal(rec.status, "completed", rec.error);
    assert.deepEqual(rec.result, [sdk.POLICY_APPROVER, "ada"]);
    assert.deepEqual(passes, [0, 1]);
    assert.deepEqual(resuming, [false, true], "isResuming sees the rule's journaled decision");
    const byRule = (await client.events(run)).filter(
      (e) => e.type === "decision_accepted" && (e["verdict"] as sdk.JsonObject | undefined)?.["approver"] === sdk.POLICY_APPROVER,
    );
    assert.equal(byRule.length, 1, "asked once: the replay reads the journal");
  });

  test("a coordinator without rules answers suspend: the pass suspends, never approves", async () => {
    const agent = agentName();
    const passes: number[] = [];
    await asking(pnc, agent, "issue_refund", { amount: 5 }, passes);
    const run = await plainClient.start(agent, {});
    const rec = await plainClient.wait(run, sdk.suspended, { timeoutMs: 20_000 });
    assert.equal(rec.status, "suspended", rec.error);
    assert.deepEqual(passes, [0]);
  });
});
