/**
 * The v1 wire messages' decoders: the same rules and rejection codes as the
 * Go `subjects` package and the Python SDK (checked by the shared
 * conformance vectors in testdata/conformance).
 */

import { InvalidToken, ProtocolError } from "./errors.js";
import { isObject, text, type JsonObject, type JsonValue } from "./json.js";
import { validateToken } from "./subjects.js";

/** The protocol version this SDK speaks. */
export const VERSION = 1;
/** The largest message other than a decision, in bytes. */
export const MAX_MESSAGE_SIZE = 1 << 20;
/** The largest decision, in bytes. */
export const MAX_DECISION_SIZE = 64 << 10;
/** The longest id (interrupt, decision, thread, approver), in bytes. */
export const MAX_ID_LEN = 256;

const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;
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
};

const passNumber: Check = (field, v) => {
  int(field, v);
  if (typeof v === "number" && v < 0) throw malformed(`pass ${v} is negative`);
};

const anything: Check = () => undefined;

const object: Check = (field, v) => {
  if (!isObject(v)) throw malformed(`${field} must be a JSON object`);
};

const time: Check = (field, v) => {
  if (v === null || v === undefined) return;
  if (typeof v !== "string" || !RFC3339.test(v)) throw malformed(`field '${field}': must be an RFC 3339 time`);
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
};

/** Check one interrupt (as in a suspension); throw {@link ProtocolError}. */
export function validateInterrupt(obj: JsonValue | undefined): JsonObject {
  const d = fields(obj, INTERRUPT, "interrupt");
  checkId("id", d["id"] ?? "");
  checkId("reason", d["reason"] ?? "");
  return d;
}

const DECISION: Record<string, Check> = {
  version: anything,
  decisionId: anything,
  interruptId: anything,
  status: optString,
  payload: anything,
  metadata: object,
  approver: optId,
  comment: optString,
};

function decision(obj: JsonValue | undefined): JsonObject {
  const d = fields(obj, DECISION, "decision");
  checkId("decisionId", d["decisionId"] ?? "");
  checkId("interruptId", d["interruptId"] ?? "");
  const status = d["status"] ?? "";
  if (status === "") throw malformed('status is required: "resolved" or "cancelled"');
  if (status !== "resolved" && status !== "cancelled") {
    throw malformed(`status ${JSON.stringify(status)} is not "resolved" or "cancelled"`);
  }
  if (Object.hasOwn(d, "payload") && d["payload"] === null) {
    throw malformed("payload is null: omit it to send no payload");
  }
  // The limit holds for the decision as the coordinator records it too
  // (Go's encoding escapes <, > and &, and U+2028/U+2029).
  const n = recordedSize(d);
  if (n > MAX_DECISION_SIZE) {
    throw new ProtocolError(
      "too_large",
      `${n} bytes as recorded (JSON re-encoded: <, > and & escaped), the limit is ${MAX_DECISION_SIZE}`,
    );
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

function head(data: Uint8Array, limit: number): JsonObject {
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
  const v = obj["version"];
  if (v === null || v === undefined) throw malformed(`version is required (this build speaks version ${VERSION})`);
  if (v !== VERSION) {
    throw new ProtocolError("unsupported_version", `version ${JSON.stringify(v)}; this build speaks version ${VERSION}`);
  }
  // JSON.parse reads 1.0 and 1e0 as 1: the version must be written 1, as
  // Go (which compares the token) and Python (which wants an int) require.
  const written = memberSource(src, "version");
  if (written !== String(VERSION)) {
    throw new ProtocolError("unsupported_version", `version ${written ?? "?"}; this build speaks version ${VERSION}`);
  }
  return obj;
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

/** Parse and validate a decision. */
export function decodeDecision(data: Uint8Array): JsonObject {
  return decision(head(data, MAX_DECISION_SIZE));
}

/** Parse and validate a suspension. */
export function decodeSuspension(data: Uint8Array): JsonObject {
  const d = fields(
    head(data, MAX_MESSAGE_SIZE),
    { ...PASSREF, interrupts: anything, journal, suspendedAt: time },
    "suspension",
  );
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
  });
  return d;
}

/** Parse and validate a completion. */
export function decodeCompletion(data: Uint8Array): JsonObject {
  const d = fields(head(data, MAX_MESSAGE_SIZE), { ...PASSREF, result: anything, journal, completedAt: time }, "completion");
  passref(d);
  return d;
}

/** Parse and validate a failure. */
export function decodeFailure(data: Uint8Array): JsonObject {
  const d = fields(head(data, MAX_MESSAGE_SIZE), { ...PASSREF, error: optString, failedAt: time }, "failure");
  passref(d);
  if (!d["error"]) throw malformed("error is required");
  return d;
}

/** Parse and validate a work item. */
export function decodeWork(data: Uint8Array): JsonObject {
  const d = fields(head(data, MAX_MESSAGE_SIZE), { ...PASSREF, decisions: anything, journal }, "work item");
  passref(d);
  const ds = d["decisions"];
  if (ds !== null && ds !== undefined && !Array.isArray(ds)) throw malformed("field 'decisions': must be a list");
  (ds ?? []).forEach((x, i) => {
    try {
      decision(x);
    } catch (e) {
      if (e instanceof ProtocolError) throw new ProtocolError(e.code, `decisions[${i}]: ${e.detail}`);
      throw e;
    }
  });
  return d;
}

/** The decoder of each message kind, by the name the conformance vectors use. */
export const DECODERS: Readonly<Record<string, (data: Uint8Array) => JsonObject>> = Object.freeze({
  decision: decodeDecision,
  suspension: decodeSuspension,
  completion: decodeCompletion,
  failure: decodeFailure,
  work: decodeWork,
});
