/**
 * The shared conformance vectors in testdata/conformance, which the Go and
 * Python tests read too: ids, subjects, message decoding and audit entries.
 */

import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";

import * as sdk from "../src/index.js";
import { toWire } from "../src/run.js";
import { REPO } from "@interlock/testing";

const VECTORS = join(REPO, "testdata", "conformance");

type Vector = Record<string, unknown>;
function load(name: string): Record<string, Vector[]> {
  return JSON.parse(readFileSync(join(VECTORS, name), "utf8")) as Record<string, Vector[]>;
}
const s = (v: unknown): string => v as string;
const n = (v: unknown): number => v as number;

const IDS = load("ids.json");
const SUBJECTS = load("subjects.json");
const MESSAGES = load("messages.json");
const EVENTS = load("events.json");

function cases(file: Record<string, Vector[]>, key: string): Vector[] {
  const c = file[key];
  if (!Array.isArray(c) || c.length === 0) throw new Error(`${key} has no vectors`);
  return c;
}

describe("ids.json", () => {
  test("interrupt ids", () => {
    for (const v of cases(IDS, "interruptIds")) {
      assert.equal(sdk.interruptId(s(v["runId"]), s(v["toolCallId"]), n(v["ordinal"])), v["id"]);
    }
  });
  test("step keys", () => {
    for (const v of cases(IDS, "stepKeys")) assert.equal(sdk.stepKey(s(v["toolCallId"]), s(v["name"]), n(v["ordinal"])), v["key"]);
  });
  test("message ids and keys", () => {
    for (const v of cases(IDS, "workMsgIds")) assert.equal(sdk.workMsgId(s(v["runId"]), n(v["pass"])), v["msgId"]);
    for (const v of cases(IDS, "startMsgIds")) assert.equal(sdk.startMsgId(s(v["runId"]), s(v["nonce"])), v["msgId"]);
    for (const v of cases(IDS, "passKeys")) {
      assert.equal(sdk.passKey(s(v["workMsgId"]), new TextEncoder().encode(s(v["work"]))), v["key"]);
    }
    for (const v of cases(IDS, "outcomeMsgIds")) assert.equal(sdk.outcomeMsgId(s(v["runId"]), n(v["pass"]), s(v["key"])), v["msgId"]);
    for (const v of cases(IDS, "emitMsgIds")) assert.equal(sdk.emitMsgId(s(v["runId"]), n(v["n"]), s(v["key"])), v["msgId"]);
    for (const v of cases(IDS, "pendingKeys")) assert.equal(sdk.pendingKey(s(v["runId"]), s(v["interruptId"])), v["key"]);
    for (const v of cases(IDS, "decisionMsgIds")) assert.equal(sdk.decisionMsgId(s(v["approver"]), s(v["decisionId"])), v["msgId"]);
    for (const v of cases(IDS, "decisionAttemptMsgIds")) {
      assert.equal(
        sdk.decisionAttemptMsgId(s(v["approver"]), s(v["decisionId"]), n(v["rejected"]), new TextEncoder().encode(s(v["body"]))),
        v["msgId"],
      );
    }
    for (const v of cases(IDS, "deadLetterMsgIds")) {
      assert.equal(sdk.deadLetterMsgId(s(v["consumer"]), s(v["stream"]), n(v["sequence"])), v["msgId"]);
    }
  });
  test("a pass key without a work message id is a fresh nonce", () => {
    const a = sdk.passKey("", new Uint8Array());
    assert.match(a, /^[0-9a-f]{32}$/);
    assert.notEqual(a, sdk.passKey("", new Uint8Array()));
  });
  test("uuid7", () => {
    assert.match(sdk.uuid7(), /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });
});

describe("subjects.json", () => {
  test("tokens", () => {
    for (const v of cases(SUBJECTS, "tokens")) {
      if (v["valid"]) sdk.validateToken("token", s(v["token"]));
      else assert.throws(() => sdk.validateToken("token", s(v["token"])), sdk.InvalidToken, JSON.stringify(v["token"]));
    }
  });
  test("inbox prefixes", () => {
    for (const v of cases(SUBJECTS, "inboxPrefixes")) assert.equal(sdk.inboxPrefix(s(v["identity"])), v["prefix"]);
  });
  test("subjects", () => {
    for (const v of cases(SUBJECTS, "subjects")) {
      const args = v["args"] as string[];
      const build = (): string => {
        const ns = new sdk.Namespace(s(v["prefix"]));
        const a = (i: number): string => args[i]!;
        switch (v["op"]) {
          case "work": return ns.work(a(0));
          case "start": return ns.start(a(0));
          case "startAs": return ns.startAs(a(0), a(1));
          case "suspended": return ns.suspended(a(0), a(1));
          case "completed": return ns.completed(a(0), a(1));
          case "failed": return ns.failed(a(0), a(1));
          case "resume": return ns.resume(a(0));
          case "resumeAs": return ns.resume(a(0), a(1));
          case "events": return ns.events(a(0), a(1));
          case "runEvents": return ns.runEvents(a(0));
          case "runOutcomes": return ns.runOutcomes(a(0), a(1));
          case "agui": return ns.agui(a(0), a(1));
          case "deadLetter": return ns.deadLetter(a(0));
          default: throw new Error(`unknown op ${String(v["op"])}`);
        }
      };
      if ("error" in v) assert.throws(build, sdk.InvalidToken, JSON.stringify(v));
      else assert.equal(build(), v["subject"]);
    }
  });
});

function messageBytes(c: Vector): Uint8Array {
  if ("rawBase64" in c) return new Uint8Array(Buffer.from(s(c["rawBase64"]), "base64"));
  if ("raw" in c) return new TextEncoder().encode(s(c["raw"]));
  const msg = structuredClone(c["message"]) as Record<string, unknown>;
  const pad = c["pad"] as { in?: (string | number)[]; field: string; bytes: number } | undefined;
  if (pad) {
    let at = msg as Record<string | number, unknown>;
    for (const step of pad.in ?? []) at = at[step] as Record<string | number, unknown>;
    at[pad.field] = "x".repeat(pad.bytes);
  }
  return new TextEncoder().encode(JSON.stringify(msg));
}

describe("messages.json", () => {
  for (const c of cases(MESSAGES, "cases")) {
    test(`${s(c["kind"])}: ${s(c["name"])}`, () => {
      const decode = sdk.DECODERS[s(c["kind"])];
      if (!decode) throw new Error(`no decoder for ${s(c["kind"])}`);
      const data = messageBytes(c);
      if (c["code"] === null) {
        decode(data);
      } else {
        assert.throws(
          () => decode(data),
          (e: unknown) => e instanceof sdk.ProtocolError && e.code === c["code"],
          `want ${s(c["code"])}`,
        );
      }
    });
  }

  test("decoders only ever throw ProtocolError (a seeded mutation fuzz of every vector)", () => {
    let seed = 15;
    const rand = (k: number): number => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed % k;
    };
    const codes = new Set(["malformed", "unsupported_version", "too_large", "call_mismatch"]);
    const seeds = cases(MESSAGES, "cases")
      .filter((c) => !("pad" in c))
      .map((c) => [s(c["kind"]), messageBytes(c)] as const);
    const alphabet = new TextEncoder().encode('{}[]",:0123456789.-eE truefalsnul\\\x00\x7f');
    const extra = [0xc3, 0xa9, 0xff];
    const pool = [...alphabet, ...extra];
    for (let i = 0; i < 10000; i++) {
      const [kind, data] = seeds[rand(seeds.length)]!;
      const buf = [...data];
      for (let j = 0, k = 1 + rand(4); j < k; j++) {
        const op = rand(3);
        const at = rand(buf.length + 1);
        if (op === 0 && buf.length) buf.splice(Math.min(at, buf.length - 1), 1);
        else if (op === 1) buf.splice(at, 0, pool[rand(pool.length)]!);
        else if (buf.length) buf[Math.min(at, buf.length - 1)] = pool[rand(pool.length)]!;
      }
      try {
        sdk.DECODERS[kind]!(Uint8Array.from(buf));
      } catch (e) {
        assert.ok(e instanceof sdk.ProtocolError && codes.has(e.code), `${kind} ${Buffer.from(buf).toString()} ${String(e)}`);
      }
    }
  });
});

describe("events.json", () => {
  for (const c of cases(EVENTS, "cases")) {
    test(s(c["name"]), () => {
      const data = "raw" in c ? new TextEncoder().encode(s(c["raw"])) : new TextEncoder().encode(JSON.stringify(c["data"]));
      assert.deepEqual(new sdk.Namespace().storedEvent(s(c["subject"]), data), c["event"]);
    });
  }
});

describe("interrupts on the wire", () => {
  test("oneClickLinks false asks for no links; unset, the field is absent", () => {
    assert.equal(toWire("int-1", "", { oneClickLinks: false })["oneClickLinks"], false);
    assert.ok(!("oneClickLinks" in toWire("int-1", "", {})));
  });
  test("a request naming another tool call than the scope's is refused", () => {
    assert.throws(() => toWire("int-1", "call_1", { toolCallId: "call_2" }), sdk.ToolCallMismatch);
  });
  test("a request that breaks the protocol is refused before anything is published", () => {
    assert.throws(() => toWire("int-1", "", { remindBeforeSeconds: [0] }), sdk.InvalidRequest);
    assert.throws(() => toWire("int-1", "", { onExpiry: { action: "resolve" } }), sdk.InvalidRequest);
  });
  test("the reason of a cancellation comes from who cancelled, never from metadata", () => {
    const denied = new sdk.Decision({ interruptId: "i", status: "cancelled", approver: "ada", metadata: { reason: "expired" } });
    assert.equal(denied.cancelReason, "denied");
    const expired = new sdk.Decision({ interruptId: "i", status: "cancelled", approver: sdk.EXPIRY_APPROVER });
    assert.equal(expired.cancelReason, "expired");
    assert.equal(new sdk.Cancelled(expired).reason, "expired");
  });
  test("falsy payloads are answers", () => {
    for (const payload of [false, 0, "", [], {}]) {
      const d = new sdk.Decision({ interruptId: "i", status: "resolved", payload });
      assert.equal(d.hasPayload, true);
      assert.deepEqual(d.payload, payload);
    }
    assert.equal(new sdk.Decision({ interruptId: "i", status: "resolved" }).hasPayload, false);
  });
});

describe("subjects.json workers", () => {
  test("the durable consumer of an agent's workers and the subjects it filters", () => {
    for (const v of cases(SUBJECTS, "workers")) {
      const ns = new sdk.Namespace(s(v["prefix"]));
      if (v["error"] !== undefined) {
        assert.throws(() => ns.agentWork(s(v["agent"])), sdk.InvalidToken);
        continue;
      }
      assert.deepEqual(ns.agentWork(s(v["agent"])), v["subjects"]);
      assert.equal(sdk.workerDurable(s(v["agent"])), v["durable"]);
    }
  });
});

describe("subjects.json backlog", () => {
  test("the wildcards matching every agent's waiting work", () => {
    const vs = cases(SUBJECTS, "backlog");
    assert.ok(vs.length > 0);
    for (const v of vs) assert.deepEqual(new sdk.Namespace(s(v["prefix"])).backlog(), v["subjects"]);
  });
});

test("only a resolved decision reads as resolved (a withdrawn one read as an approval)", () => {
  for (const status of ["withdrawn", "approved", ""]) {
    const d = new sdk.Decision({ interruptId: "i", status });
    assert.equal(d.status, "cancelled", status);
  }
  assert.equal(new sdk.Decision({ interruptId: "i", status: "resolved" }).status, "resolved");
});
