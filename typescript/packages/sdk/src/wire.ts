/**
 * The wire messages' decoders, protocol versions 1 and 2: the same rules and
 * rejection codes as the Go `subjects` package and the Python SDK (checked
 * by the shared conformance vectors in testdata/conformance). Readers accept
 * both versions and refuse a version 2 field in a message that says version
 * 1; writers say the lowest version that carries what they write
 * ({@link wireVersion}).
 */

import { callDigest } from "./calldigest.js";
import { InvalidToken, ProtocolError } from "./errors.js";
import { isObject, text, type JsonObject, type JsonValue } from "./json.js";
import { validateToken } from "./subjects.js";
import { POLICY_APPROVER } from "./types.js";

/** The protocol version of messages without a version 2 field. */
export const VERSION = 1;
/** The protocol version of decision policies (quorum votes, approvals bound to a tool call, operator rules, execution keys). */
export const VERSION2 = 2;
/** The most approvals or denials a policy may ask for. */
export const MAX_POLICY_VOTES = 32;
/** The largest message other than a decision, in bytes. */
export const MAX_MESSAGE_SIZE = 1 << 20;
/** The largest decision, in bytes. */
export const MAX_DECISION_SIZE = 64 << 10;
/**
 * How deep any message nests objects and lists, counting its own (Go:
 * subjects.MaxDepth): every reader holds it (Python's decoder stops near 990).
 */
export const MAX_DEPTH = 128;
/**
 * How deep a decision nests (Go: subjects.MaxDecisionDepth): the coordinator
 * carries it up to four levels deeper in a work item.
 */
export const MAX_DECISION_DEPTH = 64;
/** The longest id (interrupt, decision, thread, approver), in bytes. */
export const MAX_ID_LEN = 256;

// RFC 3339 as Go reads it: ASCII digits, upper-case T and Z, a real date and
// time (no month 13, February 30 or second 60), an offset of at most 24:60.
const RFC3339 = /^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?(Z|[+-]([0-9]{2}):([0-9]{2}))$/;

function isTime(v: string): boolean {
  const m = RFC3339.exec(v);
  if (!m) return false;
  const [y, mo, d, h, mi, sec] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const leap = y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0);
  const days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][mo - 1] ?? 0;
  const [oh, om] = [Number(m[9] ?? 0), Number(m[10] ?? 0)];
  return d >= 1 && d <= days && h <= 23 && mi <= 59 && sec <= 59 && oh <= 24 && om <= 60;
}
// C0 and C1 control characters (Unicode category Cc).
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

type Check = (field: string, v: JsonValue | undefined) => void;

const malformed = (detail: string): ProtocolError => new ProtocolError("malformed", detail);

const checkId: Check = (field, v) => {
  if (typeof v !== "string") throw malformed(`field '${field}': must be a string`);
  if (v === "") throw malformed(`${field} is required`);
  const size = Buffer.byteLength(v, "utf8");
  if (size > MAX_ID_LEN) throw malformed(`${field} is ${size} bytes, longer than ${MAX_ID_LEN}`);
  const c = CONTROL.exec(v);
  if (c) throw malformed(`${field} has control character ${JSON.stringify(c[0])}`);
};

const checkToken: Check = (field, v) => {
  if (typeof v !== "string") throw malformed(`field '${field}': must be a string`);
  try {
    validateToken(field, v);
  } catch (e) {
    if (e instanceof InvalidToken) throw malformed(e.message);
    throw e;
  }
};

const optString: Check = (field, v) => {
  if (v !== null && v !== undefined && typeof v !== "string") throw malformed(`field '${field}': must be a string`);
};

const bool: Check = (field, v) => {
  if (typeof v !== "boolean") throw malformed(`${field} must be true or false`);
};

const optId: Check = (field, v) => {
  if (v !== null && v !== undefined && v !== "") checkId(field, v);
};

const int: Check = (field, v) => {
  if (v !== null && v !== undefined && !(typeof v === "number" && Number.isInteger(v))) {
    throw malformed(`field '${field}': must be an integer`);
  }
  if (typeof v === "number" && !Number.isSafeInteger(v)) {
    throw malformed(`field '${field}': ${v} is beyond ±(2^53-1), which not every reader holds exactly`);
  }
};

const passNumber: Check = (field, v) => {
  int(field, v);
  if (typeof v === "number" && v < 0) throw malformed(`pass ${v} is negative`);
};

const unsigned: Check = (field, v) => {
  int(field, v);
  if (typeof v === "number" && v < 0) throw malformed(`field '${field}': ${v} is negative`);
};

const anything: Check = () => undefined;

const object: Check = (field, v) => {
  if (!isObject(v)) throw malformed(`${field} must be a JSON object`);
};

const time: Check = (field, v) => {
  if (v === null || v === undefined) return;
  if (typeof v !== "string" || !isTime(v)) throw malformed(`field '${field}': must be an RFC 3339 time`);
};

const list =
  (item: Check): Check =>
  (field, v) => {
    if (v === null || v === undefined) return;
    if (!Array.isArray(v)) throw malformed(`field '${field}': must be a list`);
    v.forEach((x, i) => item(`${field}[${i}]`, x));
  };

const journal: Check = (field, v) => {
  if (v === null || v === undefined) return;
  if (!isObject(v)) throw malformed(`field '${field}': must be an object`);
  for (const k of Object.keys(v)) checkId("journal key", k);
};

function fields(obj: JsonValue | undefined, spec: Record<string, Check>, what: string): JsonObject {
  if (!isObject(obj)) throw malformed(`${what} must be a JSON object`);
  for (const k of Object.keys(obj)) {
    if (!Object.hasOwn(spec, k)) throw malformed(`${what}: unknown field '${k}'`);
  }
  for (const [k, check] of Object.entries(spec)) {
    if (Object.hasOwn(obj, k)) check(k, obj[k]);
  }
  return obj;
}

const num = (v: JsonValue | undefined): number => (typeof v === "number" ? v : 0);

const expiry: Check = (_field, v) => {
  if (v === null || v === undefined) return;
  const p = fields(
    v,
    { action: optString, payload: anything, approvers: list(checkId), extendSeconds: int, times: int },
    "onExpiry",
  );
  const action = typeof p["action"] === "string" ? p["action"] : "";
  if (action === "resolve") {
    if (!Object.hasOwn(p, "payload") || p["payload"] === null) {
      throw malformed("onExpiry: resolve needs a payload (the answer to apply)");
    }
  } else if (action === "escalate") {
    if (num(p["extendSeconds"]) <= 0) throw malformed("onExpiry: escalate needs extendSeconds > 0");
  } else if (action !== "cancel" && action !== "") {
    throw malformed(`onExpiry.action '${action}' is not cancel, resolve or escalate`);
  }
  if (num(p["times"]) < 0) throw malformed(`onExpiry.times ${num(p["times"])} is negative`);
};

const positiveInts: Check = (field, v) => {
  list(int)(field, v);
  (Array.isArray(v) ? v : []).forEach((sec, i) => {
    if (num(sec) <= 0) {
      throw malformed(
        `remindBeforeSeconds[${i}] is ${num(sec)}; reminders are seconds before the deadline, more than 0`,
      );
    }
  });
};

const DIGEST = /^[0-9a-f]{64}$/;

const digest: Check = (field, v) => {
  if (v === null || v === undefined || v === "") return;
  if (typeof v !== "string" || !DIGEST.test(v)) throw malformed(`${field} must be 64 lowercase hex digits`);
};

const call: Check = (_field, v) => {
  if (v === null || v === undefined) return;
  const c = fields(v, { tool: anything, arguments: anything, digest: anything }, "call");
  checkId("call.tool", c["tool"] ?? "");
  if (Object.hasOwn(c, "arguments") && c["arguments"] === null) {
    throw malformed("call.arguments is null: omit it for no arguments");
  }
  const d = c["digest"];
  if (typeof d !== "string" || !DIGEST.test(d)) throw malformed("call.digest must be 64 lowercase hex digits");
  if (probing) return; // the arguments are free-form: the digest was checked on the message as written
  let want: string;
  try {
    want = callDigest(c["tool"] as string, c["arguments"]);
  } catch (e) {
    if (e instanceof ProtocolError) throw new ProtocolError("call_mismatch", `call.arguments have no digest: ${e.detail}`);
    throw e;
  }
  if (want !== d) {
    throw new ProtocolError("call_mismatch", `call.digest ${d} is not the digest of the call's tool and arguments (${want})`);
  }
};

const voteCount =
  (name: string): Check =>
  (_field, v) => {
    int(name, v);
    if (typeof v === "number" && (v < 0 || v > MAX_POLICY_VOTES)) {
      throw malformed(`${name} ${v} is not between 1 and ${MAX_POLICY_VOTES}`);
    }
  };

const policy: Check = (_field, v) => {
  if (v === null || v === undefined) return;
  fields(
    v,
    {
      approvals: voteCount("policy.approvals"),
      denials: voteCount("policy.denials"),
      allowRequester: bool,
      allowChange: bool,
      rules: list(checkId),
    },
    "policy",
  );
};

const VOTE: Record<string, Check> = {
  decisionId: optString,
  approver: optString,
  status: optString,
  payload: anything,
  comment: optString,
  metadata: anything,
  callDigest: digest,
  arguments: anything,
  at: time,
  seq: unsigned,
  via: optString,
};

const vote: Check = (field, v) => {
  fields(v, VOTE, field);
};

const INTERRUPT: Record<string, Check> = {
  id: anything,
  reason: anything,
  message: optString,
  toolCallId: optString,
  responseSchema: object,
  expiresAt: time,
  metadata: object,
  approvers: list(checkId),
  approverGroups: list(checkId),
  onExpiry: expiry,
  remindBeforeSeconds: positiveInts,
  oneClickLinks: bool,
  chatDecisions: bool,
  sensitive: bool,
  call,
  policy,
};

/** Check one interrupt (as in a suspension); throw {@link ProtocolError}. */
export function validateInterrupt(obj: JsonValue | undefined): JsonObject {
  const d = fields(obj, INTERRUPT, "interrupt");
  checkId("id", d["id"] ?? "");
  checkId("reason", d["reason"] ?? "");
  return d;
}

const DECISION: Record<string, Check> = {
  version: int, // a published decision's is checked first; a work item's decisions' here
  decisionId: anything,
  interruptId: anything,
  status: optString,
  payload: anything,
  metadata: object,
  approver: optId,
  comment: optString,
  callDigest: digest,
  arguments: anything,
  votes: list(vote),
  executionKey: digest,
  rule: optString,
};

const set = (v: JsonValue | undefined): boolean =>
  v !== undefined && v !== null && v !== "" && !(Array.isArray(v) && v.length === 0);

function v2Interrupt(i: JsonObject): string {
  for (const f of ["call", "policy"]) if (i[f] !== undefined && i[f] !== null) return f;
  return "";
}

function v2Decision(d: JsonObject): string {
  if (d["status"] === "withdrawn") return "status withdrawn";
  for (const f of ["callDigest", "arguments", "votes", "executionKey", "rule"]) if (set(d[f])) return f;
  return "";
}

/** The message kinds {@link wireVersion} knows. */
export type MessageKind = "decision" | "suspension" | "work" | "run" | "verdict" | "notice";

function v2Field(kind: MessageKind, m: JsonObject): string {
  if (kind === "decision") return v2Decision(m);
  if ((kind === "suspension" || kind === "run") && set(m["requester"])) return "requester";
  if (kind === "work") {
    const ds = Array.isArray(m["decisions"]) ? m["decisions"] : [];
    for (const [i, d] of ds.entries()) {
      const f = isObject(d) ? v2Decision(d) : "";
      if (f) return `decisions[${i}].${f}`;
    }
    return "";
  }
  if (kind === "verdict") {
    if (m["outcome"] === "vote_recorded") return "outcome vote_recorded";
    for (const f of ["tally", "rule"]) if (set(m[f])) return f;
    return "";
  }
  if (kind === "notice" && set(m["tallies"])) return "tallies";
  const ins = Array.isArray(m["interrupts"]) ? m["interrupts"] : [];
  for (const [i, x] of ins.entries()) {
    if (!isObject(x)) continue;
    const f = v2Interrupt(x);
    if (f) return `interrupts[${i}].${f}`;
    if (kind === "run") {
      if (set(x["votes"])) return `interrupts[${i}].votes`;
      const d = x["decision"];
      const g = isObject(d) ? v2Decision(d) : "";
      if (g) return `interrupts[${i}].decision.${g}`;
    }
  }
  return "";
}

/**
 * The version `message` of `kind` must say: 2 when it carries a version 2
 * field, 1 otherwise (Go: `subjects.WireVersion`). Writers set it just
 * before encoding, so version 1 readers keep reading every message that
 * needs nothing newer.
 */
export function wireVersion(kind: MessageKind, message: JsonObject): number {
  return v2Field(kind, message) ? VERSION2 : VERSION;
}

/** Set `message.version` (and each work item decision's) to {@link wireVersion}; return `message`. */
export function versioned(kind: MessageKind, message: JsonObject): JsonObject {
  if (kind === "work" && Array.isArray(message["decisions"])) {
    for (const d of message["decisions"]) if (isObject(d)) d["version"] = wireVersion("decision", d);
  }
  message["version"] = wireVersion(kind, message);
  return message;
}

function checkVersion(kind: MessageKind, m: JsonObject): void {
  const v = typeof m["version"] === "number" ? m["version"] : VERSION;
  if (v < VERSION2) {
    const f = v2Field(kind, m);
    if (f) throw malformed(`field ${f} needs version ${VERSION2} (the message says version ${v})`);
  }
}

function decision(obj: JsonValue | undefined): JsonObject {
  const d = fields(obj, DECISION, "decision");
  checkId("decisionId", d["decisionId"] ?? "");
  checkId("interruptId", d["interruptId"] ?? "");
  const status = d["status"] ?? "";
  if (status === "") throw malformed('status is required: "resolved" or "cancelled"');
  if (status !== "resolved" && status !== "cancelled" && status !== "withdrawn") {
    throw malformed(`status ${JSON.stringify(status)} is not "resolved" or "cancelled"`);
  }
  if (Object.hasOwn(d, "payload") && d["payload"] === null) {
    throw malformed("payload is null: omit it to send no payload");
  }
  if (Object.hasOwn(d, "arguments") && d["arguments"] === null) {
    throw malformed("arguments is null: omit it to keep the call's arguments");
  }
  if (Object.hasOwn(d, "arguments") && !isObject(d["arguments"])) throw malformed("arguments must be a JSON object");
  checkVersion("decision", d);
  return d;
}

/**
 * A decision a replay or an ask reply carries: one the coordinator applied,
 * so resolved or cancelled (a withdrawal takes a vote back and never reaches
 * a pass), in a version this build speaks (0 or none is 1).
 */
function replayed(obj: JsonValue | undefined): JsonObject {
  const d = decision(obj);
  if (d["status"] !== "resolved" && d["status"] !== "cancelled") {
    throw malformed(`status ${JSON.stringify(d["status"])}: a replay carries decisions "resolved" or "cancelled" only`);
  }
  const v = d["version"];
  if (v !== undefined && v !== null && v !== 0 && v !== VERSION && v !== VERSION2) {
    throw new ProtocolError("unsupported_version", `decision version ${JSON.stringify(v)}; this build speaks versions ${VERSION} and ${VERSION2}`);
  }
  return d;
}

/** The size of `v` as the coordinator encodes it in a run record. */
export function recordedSize(v: JsonValue): number {
  const text = JSON.stringify(v);
  let escaped = 0;
  let lines = 0;
  for (const c of text) {
    if (c === "<" || c === ">" || c === "&") escaped++;
    else if (c === "\u2028" || c === "\u2029") lines++;
  }
  return Buffer.byteLength(text, "utf8") + 5 * escaped + 3 * lines;
}

const PASSREF: Record<string, Check> = {
  version: anything,
  runId: anything,
  agent: anything,
  threadId: optId,
  pass: passNumber,
  input: anything,
};

function passref(d: JsonObject): void {
  checkToken("runId", d["runId"] || "");
  checkToken("agent", d["agent"] || "");
}

/**
 * The first key that appears twice in one object of src (valid JSON),
 * anywhere in it, or undefined. JSON.parse keeps the last copy while Go
 * merged both into one struct, so such a message meant two things: every
 * decoder refuses it.
 */
function repeatedKey(src: string): string | undefined {
  const stack: (Set<string> | undefined)[] = [];
  for (let i = 0; i < src.length; i++) {
    const c = src[i];
    if (c === "{") stack.push(new Set());
    else if (c === "[") stack.push(undefined);
    else if (c === "}" || c === "]") stack.pop();
    else if (c === '"') {
      let j = i + 1;
      for (; j < src.length && src[j] !== '"'; j++) if (src[j] === "\\") j++;
      let k = j + 1;
      while (k < src.length && " \t\n\r".includes(src[k] ?? "")) k++;
      const keys = stack[stack.length - 1];
      if (src[k] === ":" && keys !== undefined) {
        const raw = src.slice(i + 1, j);
        const key = raw.includes("\\") ? (JSON.parse(src.slice(i, j + 1)) as string) : raw;
        if (keys.has(key)) return key;
        keys.add(key);
      }
      i = j;
    }
  }
  return undefined;
}

/**
 * src (valid JSON) with each number written with a fraction or an exponent
 * whose value is an integer (`1.0`, `1e0`, `-0.0`) written `0.5` instead, or
 * undefined when it has none. JSON.parse reads `"pass":1.0` as 1, while Go
 * and Python refuse a fraction where an integer goes: a message's checks,
 * run once more on this probe, refuse it too, and read free-form values
 * (payloads, results) as they are.
 */
export function integralFloats(src: string): string | undefined {
  let out: string | undefined;
  let from = 0;
  for (let i = 0; i < src.length; i++) {
    const c = src[i]!;
    if (c === '"') {
      for (i++; src[i] !== '"'; i++) if (src[i] === "\\") i++;
      continue;
    }
    if (c !== "-" && (c < "0" || c > "9")) continue;
    let j = i + 1;
    while (j < src.length && "0123456789+-.eE".includes(src[j]!)) j++;
    const token = src.slice(i, j);
    if (/[.eE]/.test(token) && Number.isInteger(Number(token))) {
      out = (out ?? "") + src.slice(from, i) + "0.5";
      from = j;
    }
    i = j - 1;
  }
  return out === undefined ? undefined : out + src.slice(from);
}

/**
 * The message in data, checked by check (which throws on what it refuses),
 * under the size limit, the rules every message shares (one JSON object, no
 * key twice in one object, a version this build speaks, no fraction where
 * an integer goes).
 */
function decoded(data: Uint8Array, limit: number, check: (m: JsonObject) => void, depth = MAX_DEPTH): JsonObject {
  const [obj, src] = head(data, limit, depth);
  check(obj);
  const probe = integralFloats(src);
  if (probe !== undefined) onProbe(() => check(JSON.parse(probe) as JsonObject));
  return obj;
}

/**
 * Set while checks run on a probe of {@link integralFloats}, whose free-form
 * values (a call's arguments) no longer hold what was written: a check
 * that computes from them (the call digest) has run on the message itself.
 */
let probing = false;

function onProbe(run: () => void): void {
  probing = true;
  try {
    run();
  } finally {
    probing = false;
  }
}

/**
 * Whether the value `v` nests objects and lists more than `limit` levels:
 * what a worker checks before it sends (every decoder refuses a message
 * deeper than {@link MAX_DEPTH}). Level by level, so a value of any depth
 * is judged without recursion.
 */
export function valueDeeper(v: unknown, limit = MAX_DEPTH): boolean {
  let level: unknown[] = [v];
  for (let depth = 0; ; depth++) {
    const containers = level.filter((x) => typeof x === "object" && x !== null);
    if (containers.length === 0) return false;
    if (depth >= limit) return true; // containers at level depth + 1
    level = containers.flatMap((x): unknown[] => (Array.isArray(x) ? (x as unknown[]) : Object.values(x)));
  }
}

/** Whether the JSON text `src` nests objects and lists more than `limit` levels. */
export function nestedDeeper(src: string, limit: number): boolean {
  let level = 0;
  for (let i = 0; i < src.length; i++) {
    const c = src.charCodeAt(i);
    if (c === 0x22) {
      // a string: skip to its closing quote
      for (i++; i < src.length && src.charCodeAt(i) !== 0x22; i++) if (src.charCodeAt(i) === 0x5c) i++;
    } else if (c === 0x7b || c === 0x5b) {
      if (++level > limit) return true;
    } else if (c === 0x7d || c === 0x5d) {
      level--;
    }
  }
  return false;
}

function head(data: Uint8Array, limit: number, depth = MAX_DEPTH): [JsonObject, string] {
  if (data.length > limit) throw new ProtocolError("too_large", `${data.length} bytes, the limit is ${limit}`);
  let obj: unknown;
  let src = "";
  try {
    src = text(data);
    obj = JSON.parse(src);
  } catch (e) {
    throw malformed(`not a JSON object: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (!isObject(obj)) throw malformed("not a JSON object");
  if (nestedDeeper(src, depth)) throw malformed(`nested deeper than ${depth} levels`);
  const twice = repeatedKey(src);
  if (twice !== undefined) throw malformed(`field ${JSON.stringify(twice)} appears twice in one object`);
  const v = obj["version"];
  const speaks = `this build speaks versions ${VERSION} and ${VERSION2}`;
  if (v === null || v === undefined) throw malformed(`version is required (${speaks})`);
  if (v !== VERSION && v !== VERSION2) {
    throw new ProtocolError("unsupported_version", `version ${JSON.stringify(v)}; ${speaks}`);
  }
  // JSON.parse reads 1.0 and 1e0 as 1: the version must be written 1 or 2,
  // as Go (which compares the token) and Python (which wants an int) require.
  const written = memberSource(src, "version");
  if (written !== String(v)) {
    throw new ProtocolError("unsupported_version", `version ${written ?? "?"}; ${speaks}`);
  }
  return [obj, src];
}

/**
 * The source text of the value of the last top-level member named `key`
 * (after unescaping, as JSON.parse keeps the last) of `src`, a JSON object
 * that JSON.parse accepted, so well-formed; undefined when there is none.
 */
export function memberSource(src: string, key: string): string | undefined {
  const n = src.length;
  let i = 0;
  const space = (): void => {
    while (i < n && " \t\n\r".includes(src[i]!)) i++;
  };
  const string = (): string => {
    const start = i++;
    while (src[i] !== '"') i += src[i] === "\\" ? 2 : 1;
    i++;
    return src.slice(start, i);
  };
  const value = (): string => {
    const start = i;
    const c = src[i];
    if (c === '"') {
      string();
    } else if (c === "{" || c === "[") {
      let depth = 0;
      do {
        const ch = src[i];
        if (ch === '"') {
          string();
          continue;
        }
        if (ch === "{" || ch === "[") depth++;
        else if (ch === "}" || ch === "]") depth--;
        i++;
      } while (depth > 0);
    } else {
      while (i < n && !",}] \t\n\r".includes(src[i]!)) i++;
    }
    return src.slice(start, i);
  };
  let found: string | undefined;
  space();
  if (src[i] !== "{") return undefined;
  i++;
  for (;;) {
    space();
    if (src[i] !== '"') return found;
    const name = JSON.parse(string()) as string;
    space();
    i++; // the colon
    space();
    const v = value();
    if (name === key) found = v;
    space();
    if (src[i] !== ",") return found;
    i++;
  }
}

/** Parse and validate a decision as an approver publishes it (votes, executionKey and rule are the coordinator's to write). */
export function decodeDecision(data: Uint8Array): JsonObject {
  const d = decoded(
    data,
    MAX_DECISION_SIZE,
    (m) => {
      decision(m);
      for (const f of ["votes", "executionKey", "rule"]) {
        if (set(m[f])) throw malformed(`${f} is set by the coordinator only`);
      }
    },
    MAX_DECISION_DEPTH,
  );
  // The limit holds for the decision as the coordinator records it too
  // (Go's encoding escapes <, > and &, and U+2028/U+2029). It bounds what
  // approvers publish: a decision the coordinator writes (an expiry's
  // payload, a quorum's votes) is bounded by the message size only.
  const n = recordedSize(d);
  if (n > MAX_DECISION_SIZE) {
    throw new ProtocolError(
      "too_large",
      `${n} bytes as recorded (JSON re-encoded: <, > and & escaped), the limit is ${MAX_DECISION_SIZE}`,
    );
  }
  return d;
}

/** Parse and validate a suspension. */
export function decodeSuspension(data: Uint8Array): JsonObject {
  return decoded(data, MAX_MESSAGE_SIZE, suspension);
}

function suspension(m: JsonObject): void {
  const d = fields(m, { ...PASSREF, interrupts: anything, journal, suspendedAt: time, requester: optString }, "suspension");
  passref(d);
  const ins = d["interrupts"];
  if (ins !== null && ins !== undefined && !Array.isArray(ins)) throw malformed("field 'interrupts': must be a list");
  if (!ins || ins.length === 0) throw malformed("interrupts is empty: a suspension needs at least one interrupt");
  const seen = new Set<string>();
  ins.forEach((x, i) => {
    try {
      validateInterrupt(x);
    } catch (e) {
      if (e instanceof ProtocolError) throw new ProtocolError(e.code, `interrupts[${i}]: ${e.detail}`);
      throw e;
    }
    const id = (x as JsonObject)["id"] as string;
    if (seen.has(id)) throw malformed(`interrupts[${i}]: id '${id}' appears twice`);
    seen.add(id);
    const pol = (x as JsonObject)["policy"];
    if (isObject(pol) && set(pol["rules"])) {
      throw malformed(`interrupts[${i}]: policy.rules is set by the coordinator only`);
    }
  });
  if (set(d["requester"])) {
    if ((d["pass"] ?? 0) !== 0) throw malformed("requester is reported on pass 0 only");
    checkId("requester", d["requester"]);
  }
  checkVersion("suspension", d);
}

/** Parse and validate a completion. */
export function decodeCompletion(data: Uint8Array): JsonObject {
  return decoded(data, MAX_MESSAGE_SIZE, (m) => {
    passref(fields(m, { ...PASSREF, result: anything, journal, completedAt: time }, "completion"));
  });
}

/** Parse and validate a failure. */
export function decodeFailure(data: Uint8Array): JsonObject {
  return decoded(data, MAX_MESSAGE_SIZE, (m) => {
    passref(fields(m, { ...PASSREF, error: optString, failedAt: time }, "failure"));
    if (!m["error"]) throw malformed("error is required");
  });
}

/** Parse and validate a work item. */
/** The headers nats-server adds to a direct get's answer (a batch's too). */
const SERVER_HEADERS = ["nats-stream", "nats-subject", "nats-sequence", "nats-time-stamp", "nats-num-pending", "nats-last-sequence"];

/**
 * Why a stored message is not a client's publish, or undefined when it is
 * one. nats-server sends a JetStream API answer to whatever reply subject
 * the request names, with its own rights: a direct get's answer carries the
 * server's headers, or, asked for without them, none; a client's publish of
 * an Interlock input always carries its `Nats-Msg-Id`.
 */
export function notPublished(headers: { keys(): string[]; get(k: string): string } | undefined): string | undefined {
  for (const k of headers?.keys() ?? []) {
    if (SERVER_HEADERS.includes(k.toLowerCase())) {
      return `not a client's publish: it carries ${k}, which nats-server adds to a JetStream API answer it sent to this subject`;
    }
  }
  if (!headers?.get("Nats-Msg-Id")) return "not a client's publish: it carries no Nats-Msg-Id";
  return undefined;
}

export function decodeWork(data: Uint8Array): JsonObject {
  return decoded(data, MAX_MESSAGE_SIZE, work);
}

function work(m: JsonObject): void {
  const d = fields(m, { ...PASSREF, decisions: anything, journal }, "work item");
  passref(d);
  const ds = d["decisions"];
  if (ds !== null && ds !== undefined && !Array.isArray(ds)) throw malformed("field 'decisions': must be a list");
  (ds ?? []).forEach((x, i) => {
    try {
      replayed(x);
    } catch (e) {
      if (e instanceof ProtocolError) throw new ProtocolError(e.code, `decisions[${i}]: ${e.detail}`);
      throw e;
    }
  });
  checkVersion("work", d);
}

/** The decoder of each message kind, by the name the conformance vectors use. */
export const DECODERS: Readonly<Record<string, (data: Uint8Array) => JsonObject>> = Object.freeze({
  decision: decodeDecision,
  suspension: decodeSuspension,
  completion: decodeCompletion,
  failure: decodeFailure,
  work: decodeWork,
});

/**
 * The ask a worker sends on `<prefix>.ask.<agent>.<run>` before it suspends
 * on `interrupt` (protocol version 2; Go: subjects.Ask): the requester goes
 * on pass 0 only, as in a suspension.
 */
export function askMessage(runId: string, agent: string, pass: number, requester: string, interrupt: JsonObject): JsonObject {
  const msg: JsonObject = { version: VERSION2, runId, agent, pass };
  if (pass === 0 && requester) msg["requester"] = requester;
  msg["interrupt"] = interrupt;
  return msg;
}

/**
 * The decision a coordinator's answer to an ask carries, or undefined when
 * the pass must suspend as usual: only `outcome: "decided"` with a valid
 * decision by `interlock:policy` on that very interrupt is taken (Go: the
 * worker's asker). Anything else, malformed included, fails closed.
 */
export function takeAskReply(data: Uint8Array, interruptId: string): JsonObject | undefined {
  // As strictly as any message (Go: subjects.DecodeAskReply): no key twice
  // or in another case, a version this build speaks.
  try {
    const check = (m: JsonObject): void => {
      const r = fields(m, { version: anything, outcome: optString, decision: anything, detail: optString }, "ask reply");
      if (r["outcome"] === "decided") replayed(r["decision"]);
    };
    const reply = decoded(data, MAX_MESSAGE_SIZE, check);
    const d = reply["decision"];
    if (reply["outcome"] !== "decided" || !isObject(d)) return undefined;
    if (d["interruptId"] !== interruptId || d["approver"] !== POLICY_APPROVER) return undefined;
    return d;
  } catch {
    return undefined;
  }
}
