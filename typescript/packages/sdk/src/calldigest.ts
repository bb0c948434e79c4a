/**
 * The call digest of protocol version 2: SHA-256 of the RFC 8785 (JCS)
 * canonical JSON of `{"arguments": <arguments>, "tool": <tool>}`, as the Go
 * `subjects.CallDigest` and the Python SDK compute it (checked by the shared
 * conformance vectors, `policies.json`).
 */

import { createHash } from "node:crypto";

import { ProtocolError } from "./errors.js";

/** Arguments nested deeper than this have no digest (Go: maxJCSDepth). */
export const MAX_CALL_DEPTH = 64;

const malformed = (detail: string): ProtocolError => new ProtocolError("malformed", detail);

/** JSON text, for {@link callDigest} and {@link canonicalize} to parse (refusing repeated member names) instead of reading it as a string value. */
export class RawJson {
  constructor(readonly text: string | Uint8Array) {}
}

/** Mark `text` as JSON text (see {@link RawJson}). */
export function rawJson(text: string | Uint8Array): RawJson {
  return new RawJson(text);
}

/**
 * Parse JSON text, keeping every member name to refuse repeats (a parser
 * that keeps the first and one that keeps the last would see two different
 * calls under one digest). The text was accepted by JSON.parse already, so
 * it is well-formed.
 */
function parse(src: string): unknown {
  let i = 0;
  const space = (): void => {
    while (i < src.length && " \t\n\r".includes(src[i]!)) i++;
  };
  const string = (): string => {
    const start = i++;
    while (src[i] !== '"') i += src[i] === "\\" ? 2 : 1;
    i++;
    return JSON.parse(src.slice(start, i)) as string;
  };
  const value = (depth: number): unknown => {
    if (depth > MAX_CALL_DEPTH) throw malformed(`arguments are nested deeper than ${MAX_CALL_DEPTH}`);
    space();
    const c = src[i];
    if (c === '"') return string();
    if (c === "{") {
      i++;
      const obj = new Map<string, unknown>();
      space();
      if (src[i] === "}") {
        i++;
        return obj;
      }
      for (;;) {
        space();
        const k = string();
        if (obj.has(k)) throw malformed(`arguments repeat the member name ${JSON.stringify(k)}`);
        space();
        i++; // the colon
        obj.set(k, value(depth + 1));
        space();
        if (src[i++] === "}") return obj;
      }
    }
    if (c === "[") {
      i++;
      const arr: unknown[] = [];
      space();
      if (src[i] === "]") {
        i++;
        return arr;
      }
      for (;;) {
        arr.push(value(depth + 1));
        space();
        if (src[i++] === "]") return arr;
      }
    }
    const start = i;
    while (i < src.length && !",}] \t\n\r".includes(src[i]!)) i++;
    const tok = src.slice(start, i);
    if (tok === "null") return null;
    if (tok === "true") return true;
    if (tok === "false") return false;
    const n = Number(tok);
    if (!Number.isFinite(n)) throw malformed(`number ${tok} is out of the range of an IEEE 754 double`);
    return n;
  };
  return value(0);
}

function fromText(text: string | Uint8Array): unknown {
  let src: string;
  if (typeof text === "string") {
    src = text;
  } else {
    try {
      src = new TextDecoder("utf-8", { fatal: true }).decode(text);
    } catch {
      throw malformed("arguments are not valid UTF-8");
    }
  }
  if (src.trim() === "") return new Map<string, unknown>();
  try {
    JSON.parse(src);
  } catch (e) {
    throw malformed(`arguments are not JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
  return parse(src);
}

// A lone surrogate (no pair): Go's decoder makes it U+FFFD.
const LONE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

function wellFormed(s: string): string {
  return s.replace(LONE, "\ufffd");
}

function str(s: string): string {
  // JSON.stringify escapes exactly what RFC 8785 does once lone surrogates
  // are U+FFFD.
  return JSON.stringify(wellFormed(s));
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== "object" || v === null) return false;
  const proto = Object.getPrototypeOf(v) as unknown;
  return proto === Object.prototype || proto === null;
}

function write(out: string[], v: unknown, depth: number): void {
  if (depth > MAX_CALL_DEPTH) throw malformed(`arguments are nested deeper than ${MAX_CALL_DEPTH}`);
  if (v === null) {
    out.push("null");
  } else if (typeof v === "boolean") {
    out.push(v ? "true" : "false");
  } else if (typeof v === "string") {
    out.push(str(v));
  } else if (typeof v === "number") {
    if (!Number.isFinite(v)) throw malformed(`number ${v} is out of the range of an IEEE 754 double`);
    out.push(String(v)); // ECMAScript's own; -0 is "0"
  } else if (Array.isArray(v)) {
    out.push("[");
    v.forEach((e, i) => {
      if (i > 0) out.push(",");
      write(out, e, depth + 1);
    });
    out.push("]");
  } else if (v instanceof Map || isPlainObject(v)) {
    const entries: [string, unknown][] =
      v instanceof Map ? [...(v as Map<string, unknown>).entries()] : Object.entries(v);
    const members = entries.filter(([, e]) => e !== undefined);
    // Default string order compares UTF-16 code units, as RFC 8785 sorts.
    members.sort(([a], [b]) => {
      const x = wellFormed(a);
      const y = wellFormed(b);
      return x < y ? -1 : x > y ? 1 : 0;
    });
    out.push("{");
    members.forEach(([k, e], i) => {
      if (i > 0) out.push(",");
      out.push(str(k), ":");
      write(out, e, depth + 1);
    });
    out.push("}");
  } else {
    throw malformed(`arguments hold a ${typeof v}, which is not a JSON value`);
  }
}

/**
 * The RFC 8785 canonical JSON of `args`: a JSON value (objects, arrays,
 * strings, finite numbers, booleans, null) or JSON text as {@link rawJson}.
 * Throws {@link ProtocolError} (`malformed`) for a value with no canonical
 * form: a repeated member name, a number out of a double's range, nesting
 * deeper than 64, or not JSON.
 */
export function canonicalize(args: unknown): string {
  const value = args instanceof RawJson ? fromText(args.text) : args;
  const out: string[] = [];
  write(out, value, 0);
  return out.join("");
}

/**
 * The call digest of calling `tool` with `args`: 64 lowercase hex digits of
 * SHA-256 of the canonical JSON of `{"arguments": args, "tool": tool}`.
 * Arguments `undefined` (left out) are `{}`; give JSON text as
 * {@link rawJson}. Two calls have the same digest exactly when they name the
 * same tool with the same arguments as JSON values (key order, spacing,
 * escapes and number spelling aside). Throws {@link ProtocolError}
 * (`malformed`) when the arguments have no canonical form.
 */
export function callDigest(tool: string, args?: unknown): string {
  if (typeof tool !== "string") throw new TypeError("tool must be a string");
  const a = canonicalize(args === undefined ? {} : args);
  const text = `{"arguments":${a},"tool":${str(tool)}}`;
  return createHash("sha256").update(text, "utf8").digest("hex");
}
