/** W3C trace context: continue a work item's trace on its outcome. */

import { randomBytes } from "node:crypto";

const TP = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** A new trace's root span. */
export function newTraceparent(): string {
  return `00-${randomBytes(16).toString("hex")}-${randomBytes(8).toString("hex")}-01`;
}

/** A new span of `tp`'s trace; a new trace when `tp` is not valid. */
export function childTraceparent(tp: string | undefined): string {
  const m = TP.exec(tp ?? "");
  if (!m || m[1] === "0".repeat(32) || m[2] === "0".repeat(16)) return newTraceparent();
  return `00-${m[1]}-${randomBytes(8).toString("hex")}-${m[3]}`;
}
