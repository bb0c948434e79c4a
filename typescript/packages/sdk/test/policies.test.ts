/**
 * Decision policies (protocol version 2) in the TypeScript SDK: the shared
 * vectors of testdata/conformance/policies.json (call digests, the votes and
 * verdicts of the tallies), the writers' versions, and the replay's check of
 * the approved call. No server.
 */

import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";

import * as sdk from "../src/index.js";
import { PassState, runInPass, toWire } from "../src/run.js";
import { verdictFrom } from "../src/types.js";
import { REPO } from "@interlock/testing";

type Vector = Record<string, unknown>;
const POLICIES = JSON.parse(readFileSync(join(REPO, "testdata", "conformance", "policies.json"), "utf8")) as Record<
  string,
  Vector[]
>;
const s = (v: unknown): string => v as string;

const REFUND = { order: "A-1001", amount: 42.5 };
const REFUND_DIGEST = "1f475ff1f0bbac2c9780c24f3e23b28529523abdf58f64dc1e92dbbc3e69f128";
const KEY = "9".repeat(64);

function expectProtocolError(fn: () => unknown, code: string): void {
  assert.throws(fn, (e: unknown) => e instanceof sdk.ProtocolError && e.code === code);
}

describe("policies.json call digests", () => {
  for (const v of POLICIES["callDigests"] ?? []) {
    test(s(v["name"]), () => {
      const args = sdk.rawJson(s(v["arguments"]));
      if (v["error"] !== undefined) {
        expectProtocolError(() => sdk.callDigest(s(v["tool"]), args), s(v["error"]));
        return;
      }
      assert.equal(`{"arguments":${sdk.canonicalize(args)},"tool":${JSON.stringify(v["tool"])}}`, v["canonical"]);
      assert.equal(sdk.callDigest(s(v["tool"]), args), v["digest"]);
      if (s(v["arguments"]) !== "") {
        // An agent passes its arguments as values: the same digest.
        assert.equal(sdk.callDigest(s(v["tool"]), JSON.parse(s(v["arguments"])) as unknown), v["digest"]);
      }
    });
  }
  test("values JSON cannot carry have no digest", () => {
    for (const bad of [{ x: Number.NaN }, { x: Infinity }, { x: 1n }, { x: new Date(0) }, { x: () => 1 }]) {
      expectProtocolError(() => sdk.callDigest("t", bad), "malformed");
    }
    let deep: unknown = 1;
    for (let i = 0; i < 65; i++) deep = [deep];
    expectProtocolError(() => sdk.callDigest("t", deep), "malformed");
    expectProtocolError(() => sdk.callDigest("t", sdk.rawJson("[".repeat(100) + "]".repeat(100))), "malformed");
    assert.equal(sdk.callDigest("t"), sdk.callDigest("t", {}));
  });
});

describe("policies.json tallies and unsatisfiable policies", () => {
  for (const v of POLICIES["tallies"] ?? []) {
    test(`tally: ${s(v["name"])}`, () => {
      // Each vote is a decision this SDK writes and the coordinator reads;
      // each verdict reads with its tally (the tally is the coordinator's).
      for (const st of v["steps"] as Vector[]) {
        const { approver, ...vote } = st["vote"] as Record<string, unknown>;
        const d = sdk.versioned("decision", { ...(vote as sdk.JsonObject), interruptId: "int-1" });
        sdk.decodeDecision(new TextEncoder().encode(JSON.stringify(d)));
        const want = st["want"] as sdk.JsonObject;
        const verdict = verdictFrom({ ...want, decisionId: s(vote["decisionId"]), approver: s(approver) });
        assert.equal(verdict.outcome, want["outcome"]);
        if (want["tally"] !== undefined) {
          assert.ok(verdict.tally);
          assert.equal(verdict.tally.approvalsNeeded, (want["tally"] as sdk.JsonObject)["approvalsNeeded"]);
          assert.match(sdk.remaining(verdict.tally), /approvals/);
        }
      }
    });
  }
  for (const v of POLICIES["unsatisfiable"] ?? []) {
    test(`unsatisfiable: ${s(v["name"])}`, () => {
      // Whether a policy can be met is the coordinator's to say; each is a
      // request the SDK writes and the wire reads.
      const wire = toWire("int-1", "", {
        approvers: v["approvers"] as string[],
        approverGroups: (v["approverGroups"] as string[] | undefined) ?? [],
        policy: v["policy"] as sdk.Policy,
      });
      const susp = sdk.versioned("suspension", { runId: "r", agent: "a", pass: 0, interrupts: [wire] });
      assert.equal(susp["version"], 2);
      sdk.decodeSuspension(new TextEncoder().encode(JSON.stringify(susp)));
    });
  }
});

describe("versions", () => {
  test("writers use the lowest version", () => {
    const plain = toWire("int-1", "call_1", { message: "ok?" });
    assert.equal(sdk.wireVersion("suspension", { interrupts: [plain] }), 1);
    const bound = toWire("int-1", "call_1", { call: { tool: "issue_refund", arguments: REFUND } });
    assert.deepEqual(bound["call"], { tool: "issue_refund", arguments: REFUND, digest: REFUND_DIGEST });
    assert.equal(sdk.wireVersion("suspension", { interrupts: [plain, bound] }), 2);
    assert.equal(sdk.wireVersion("decision", { status: "resolved" }), 1);
    assert.equal(sdk.wireVersion("decision", { status: "withdrawn" }), 2);
    assert.equal(sdk.wireVersion("notice", { kind: "reminder" }), 1);
    assert.equal(sdk.wireVersion("notice", { kind: "reminder", tallies: { "int-1": { approvals: 1 } } }), 2);
    const work = sdk.versioned("work", { decisions: [{ status: "resolved" }, { status: "resolved", executionKey: KEY }] });
    assert.deepEqual(
      (work["decisions"] as sdk.JsonObject[]).map((d) => d["version"]),
      [1, 2],
    );
    assert.equal(work["version"], 2);
    assert.equal(sdk.wireVersion("verdict", { outcome: "vote_recorded" }), 2);
  });
  test("a request whose call has no digest, or a policy out of range, is refused", () => {
    assert.throws(() => toWire("int-1", "", { call: { tool: "pay", arguments: { amount: Number.NaN } } }), sdk.InvalidRequest);
    assert.throws(() => toWire("int-1", "", { policy: { approvals: 33 } }), sdk.InvalidRequest);
  });
});

function replay<T>(decision: sdk.JsonObject, fn: () => T): T {
  const info = { runId: "run-1", agent: "refunds", pass: 1, threadId: "", traceparent: "" };
  const id = sdk.interruptId("run-1", "call_1", 0);
  const p = new PassState(info, [{ ...decision, interruptId: id }], {}, new AbortController().signal);
  return runInPass(p, () => sdk.toolCall("call_1", fn));
}

const approved = (extra: sdk.JsonObject = {}): sdk.JsonObject => ({
  version: 2,
  decisionId: "d3",
  status: "resolved",
  callDigest: REFUND_DIGEST,
  executionKey: KEY,
  ...extra,
});

const refund = (args: sdk.JsonValue = REFUND): sdk.Request => ({ call: { tool: "issue_refund", arguments: args } });

describe("the replay checks the approved call", () => {
  test("the approved call runs, with every vote and its execution key", () => {
    const votes = [
      { decisionId: "d1", approver: "bob", status: "resolved", callDigest: REFUND_DIGEST, at: "t1" },
      { decisionId: "d3", approver: "cy", status: "resolved", callDigest: REFUND_DIGEST, at: "t2" },
    ];
    const { d, key } = replay(approved({ votes }), () => {
      // Key order and number spelling do not change the call.
      const d = sdk.interrupt(refund({ amount: 42.5, order: "A-1001" }));
      return { d, key: sdk.executionKey() };
    });
    assert.equal(key, KEY);
    assert.equal(d.executionKey, KEY);
    assert.deepEqual(
      d.votes.map((v) => [v.approver, v.at, v.status]),
      [
        ["bob", "t1", "resolved"],
        ["cy", "t2", "resolved"],
      ],
    );
  });
  test("another call is refused with CallMismatch, and gets no key", () => {
    const key = replay(approved(), () => {
      assert.throws(
        () => sdk.interrupt(refund({ order: "A-1001", amount: 4250 })),
        (e: unknown) => e instanceof sdk.CallMismatch && e.approved === REFUND_DIGEST && e.got !== REFUND_DIGEST,
      );
      return sdk.executionKey();
    });
    assert.equal(key, "");
  });
  test("a decision that approved no call approves none", () => {
    assert.throws(
      () => replay({ version: 1, decisionId: "d1", status: "resolved" }, () => sdk.interrupt(refund())),
      sdk.CallMismatch,
    );
  });
  test("edited arguments run when the decision approved them", () => {
    const edited = { order: "A-1001", amount: 40 };
    const digest = sdk.callDigest("issue_refund", edited);
    const body = (): unknown => {
      const req = refund();
      const d = sdk.interrupt(req);
      return sdk.approvedArguments(d, req.call?.arguments);
    };
    assert.deepEqual(replay(approved({ callDigest: digest, arguments: edited }), body), edited);
    assert.throws(() => replay(approved({ arguments: edited }), body), sdk.CallMismatch);
  });
  test("checkCall", () => {
    const d = new sdk.Decision({ ...approved(), interruptId: "int-1" });
    sdk.checkCall(d, "issue_refund", REFUND);
    assert.throws(() => sdk.checkCall(d, "issue_credit", REFUND), sdk.CallMismatch);
    assert.throws(() => sdk.checkCall(d, "issue_refund", { x: Number.NaN }), sdk.InvalidRequest);
    assert.ok(new sdk.CallMismatch("i", "a", "b") instanceof sdk.InterlockError);
  });
});

describe("the framework adapters' approvals body", () => {
  const body = sdk.toolApprovalBody((q: { toolCallId: string; args: sdk.JsonObject }) => ({
    call: { tool: "issue_refund", arguments: q.args },
  }));
  const ctx = { signal: new AbortController().signal, run: { runId: "run-1", agent: "a", pass: 1, threadId: "", traceparent: "" } };
  const ask = (decision: sdk.JsonObject, args: sdk.JsonObject): unknown =>
    replay(decision, () => body({ toolCallId: "call_1", args }, ctx));

  test("an approval of the call carries its digest and execution key", () => {
    const out = ask(approved(), REFUND) as sdk.ToolApproval & sdk.ApprovedCall;
    assert.equal(out.approved, true);
    assert.equal(out.callDigest, REFUND_DIGEST);
    assert.equal(out.executionKey, KEY);
    assert.equal(sdk.approvedCallMatches(out, "issue_refund", { amount: 42.5, order: "A-1001" }), true);
    assert.equal(sdk.approvedCallMatches(out, "issue_refund", { amount: 4250, order: "A-1001" }), false);
    assert.equal(sdk.approvedCallMatches({}, "issue_refund", {}), true, "a version 1 approval names no call");
  });
  test("another call fails closed; edited arguments are not an approval of the asked call", () => {
    assert.throws(() => ask(approved(), { order: "A-1001", amount: 4250 }), sdk.CallMismatch);
    const edited = { order: "A-1001", amount: 40 };
    const out = ask(approved({ callDigest: sdk.callDigest("issue_refund", edited), arguments: edited }), REFUND) as sdk.ToolApproval;
    assert.equal(out.approved, false);
  });
});
