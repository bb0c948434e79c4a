/** Deterministic ids and message ids, byte-identical to the Go and Python SDKs'. */

import { createHash, randomBytes } from "node:crypto";

function sha256hex(...parts: (string | Uint8Array)[]): string {
  const h = createHash("sha256");
  for (const p of parts) h.update(p);
  return h.digest("hex");
}

/**
 * The id of the ordinal-th interrupt (from 0) raised within a tool call:
 * `"int-"` and the first 24 hex digits of SHA-256 over the run id, the tool
 * call id (`""` outside any tool call) and the ordinal in decimal ASCII,
 * separated by NUL bytes.
 */
export function interruptId(runId: string, toolCallId: string, ordinal: number): string {
  if (!Number.isInteger(ordinal) || ordinal < 0) throw new RangeError("ordinal must be an integer >= 0");
  return "int-" + sha256hex(runId, "\0", toolCallId, "\0", String(ordinal)).slice(0, 24);
}

/** The journal key of the ordinal-th call of step `name` in a tool call. */
export function stepKey(toolCallId: string, name: string, ordinal: number): string {
  return `${wellFormed(toolCallId)}/${wellFormed(name)}#${ordinal}`;
}

/**
 * `s` with each lone surrogate as U+FFFD (String.prototype.toWellFormed), as
 * Go decodes it and records it: a key computed from `s` matches the
 * record's, so a replay finds its step (it ran again, before).
 */
export function wellFormed(s: string): string {
  return s.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd");
}

/** `Nats-Msg-Id` of a replay's work item. */
export function workMsgId(runId: string, pass: number): string {
  return `${runId}:${pass}:work`;
}

/** 32 hex digits from the operating system's random source. */
export function nonce(): string {
  return randomBytes(16).toString("hex");
}

/**
 * `Nats-Msg-Id` of a start (a run's first work item): the run, `":0:start:"`
 * and a fresh {@link nonce} per start call, reused only by that call's
 * retries, so no other publisher can store a message with it first.
 */
export function startMsgId(runId: string, nonceHex: string): string {
  return `${runId}:0:start:${nonceHex}`;
}

/**
 * The key of the pass a work item starts, from the work item as stored: the
 * first 32 hex digits of SHA-256 over `"interlock pass key"`, NUL, the item's
 * `Nats-Msg-Id`, NUL and its body. A work item without an id gets a fresh
 * {@link nonce} per attempt.
 */
export function passKey(workMsgIdValue: string, work: Uint8Array): string {
  if (!workMsgIdValue) return nonce();
  return sha256hex("interlock pass key\0", workMsgIdValue, "\0", work).slice(0, 32);
}

/** `Nats-Msg-Id` of a pass outcome (suspension, completion or failure) of the pass with `key`. */
export function outcomeMsgId(runId: string, pass: number, key: string): string {
  return `${runId}:${pass}:${key}`;
}

/** `Nats-Msg-Id` of the n-th AG-UI event (from 0) of a run, emitted by the pass with `key`. */
export function emitMsgId(runId: string, n: number, key: string): string {
  return `${runId}:emit:${n}:${key}`;
}

/**
 * `Nats-Msg-Id` of a decision published as `approver` (`""`: anonymous): the
 * decision id, prefixed with `"<approver>:"` when there is one.
 */
export function decisionMsgId(approver: string, decisionId: string): string {
  return approver ? `${approver}:${decisionId}` : decisionId;
}

/**
 * `Nats-Msg-Id` of a decision whose body is `body` (the bytes published),
 * sent after `rejected` rejected attempts with the same decision id:
 * {@link decisionMsgId}, then `":<rejected>"` when there were any, then `":"`
 * and the first 32 hex digits of SHA-256 of the body. A decision id reused
 * with another body is so another message, which the coordinator refuses
 * with `decision_id_reused`; copies of one body still deduplicate.
 */
export function decisionAttemptMsgId(approver: string, decisionId: string, rejected: number, body: Uint8Array): string {
  const base = decisionMsgId(approver, decisionId);
  const id = rejected ? `${base}:${rejected}` : base;
  return `${id}:${sha256hex(body).slice(0, 32)}`;
}

/** The `Nats-Msg-Id` of a dead letter, less the `:<nonce>` a worker adds to each attempt: one per consumer that gave up on a message. */
export function deadLetterMsgId(consumer: string, stream: string, sequence: number): string {
  return `dlq-${consumer}-${stream}-${sequence}`;
}

/** Key of an interrupt in the pending bucket: run id, `.`, and the first 12 bytes of SHA-256 of the interrupt id in hex. */
export function pendingKey(runId: string, interruptIdValue: string): string {
  return runId + "." + sha256hex(interruptIdValue).slice(0, 24);
}

/** Last token of the reply subject a client awaits a decision's verdict on. */
export function replyToken(decisionId: string): string {
  return sha256hex(decisionId).slice(0, 24);
}

/** A fresh UUIDv7 (time-ordered), as the other SDKs use for run and decision ids. */
export function uuid7(): string {
  const b = randomBytes(16);
  const ms = BigInt(Date.now());
  for (let i = 0; i < 6; i++) b[i] = Number((ms >> BigInt(8 * (5 - i))) & 0xffn);
  b[6] = (b[6]! & 0x0f) | 0x70;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const h = b.toString("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
