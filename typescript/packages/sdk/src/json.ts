/** JSON values as they travel on the wire. */

/** Any JSON value. */
export type JsonValue = null | boolean | number | string | JsonValue[] | JsonObject;
/** A JSON object. */
export interface JsonObject {
  [key: string]: JsonValue;
}

/** Whether `v` is a JSON object (not an array, not null). */
export function isObject(v: unknown): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

const encoder = new TextEncoder();
// ignoreBOM keeps a byte order mark in the text, where JSON.parse refuses
// it as Go does (RFC 8259 forbids sending one).
const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Compact JSON bytes of `v`. */
export function encode(v: unknown): Uint8Array {
  return encoder.encode(JSON.stringify(v));
}

/** UTF-8 text of `data`; throws on invalid UTF-8 (a byte order mark stays). */
export function text(data: Uint8Array): string {
  return decoder.decode(data);
}

/**
 * `v` as a JSON value (a deep copy through JSON), or a TypeError saying why
 * it is not one: `undefined`, functions, symbols, bigints, non-finite numbers
 * and cycles are refused, rather than silently dropped or turned into null.
 */
export function toJson(v: unknown, what: string): JsonValue {
  check(v, what, new Set());
  return JSON.parse(JSON.stringify(v)) as JsonValue;
}

function check(v: unknown, at: string, seen: Set<object>): void {
  switch (typeof v) {
    case "string":
    case "boolean":
      return;
    case "number":
      if (!Number.isFinite(v)) throw new TypeError(`${at}: ${v} is not a JSON number`);
      return;
    case "object":
      break;
    default:
      throw new TypeError(`${at}: a ${typeof v} is not JSON`);
  }
  if (v === null) return;
  if (seen.has(v)) throw new TypeError(`${at}: a cycle is not JSON`);
  seen.add(v);
  if (Array.isArray(v)) {
    v.forEach((x, i) => check(x, `${at}[${i}]`, seen));
  } else if (typeof (v as { toJSON?: unknown }).toJSON !== "function") {
    for (const [k, x] of Object.entries(v)) {
      if (x !== undefined) check(x, `${at}.${k}`, seen);
    }
  }
  seen.delete(v);
}
