/** Values the SDK hands to agent bodies and clients. */

import type { JsonObject, JsonValue } from "./json.js";
import type { CancelReason } from "./errors.js";

function str(v: JsonValue | undefined): string {
  return typeof v === "string" ? v : "";
}

/** A decision's status: `resolved` (an answer) or `cancelled` (a denial or an expiry). */
export type Status = "resolved" | "cancelled";

/**
 * The approver of the decisions the coordinator's expiry applies (Go:
 * `subjects.ExpiryApprover`); the coordinator refuses it from anyone else.
 */
export const EXPIRY_APPROVER = "interlock:expiry";

/** What happens to an interrupt nobody decided by its deadline. */
export interface ExpiryPolicy {
  /** `cancel` (the default), `resolve` with `payload`, or `escalate`. */
  action: "cancel" | "resolve" | "escalate";
  /** The answer `resolve` applies: the agent's own, never silence. */
  payload?: JsonValue;
  /** Who joins the approvers on an escalation. */
  approvers?: string[];
  /** How far an escalation moves the deadline, in seconds (> 0). */
  extendSeconds?: number;
  /** How many escalations before the interrupt is cancelled (default 1). */
  times?: number;
}

/**
 * What an agent asks a person. Read only on the suspend pass: on the replay
 * pass `interrupt` returns the decision without looking at it.
 */
export interface Request {
  /** What the person is asked. */
  message?: string;
  /** Open; core values `tool_call`, `input_required`, `confirmation` (default: `tool_call` in a tool-call scope, else `confirmation`). */
  reason?: string;
  /** The tool call this interrupt gates: must be the one in scope (use `toolCall`). */
  toolCallId?: string;
  /** JSON Schema a resolved payload must satisfy. */
  responseSchema?: JsonObject;
  /** After it a resolve is refused (`expired`); at it the `onExpiry` policy applies. */
  expiresAt?: Date;
  /** Milliseconds from now to the deadline (when `expiresAt` is not given). */
  timeoutMs?: number;
  /** Passed through to approvers (tool name, arguments, links, ...). */
  metadata?: JsonObject;
  /** Identities allowed to decide. */
  approvers?: string[];
  /** Groups whose members may decide. */
  approverGroups?: string[];
  /** What happens at the deadline (default: cancel). */
  onExpiry?: ExpiryPolicy;
  /** Reminders, in seconds before the deadline. */
  remindBeforeSeconds?: number[];
  /** `false`: no one-click decision links for this interrupt. */
  oneClickLinks?: boolean;
  /** false: nobody decides this interrupt from a chat (Slack buttons and forms). Default true. */
  chatDecisions?: boolean;
  /** The answer is never shown in reads, events, logs or notifications (default: true for `input_required`). */
  sensitive?: boolean;
}

/** The answer an interrupt returns on the replay pass. */
export class Decision {
  /** The interrupt decided. */
  readonly interruptId: string;
  /** `resolved` or `cancelled`. */
  readonly status: Status;
  /** The answer (`false`, `0`, `""`, `[]` and `{}` included); `undefined` when none was sent. */
  readonly payload: JsonValue | undefined;
  /** Whether the approver sent a payload (even a falsy one). */
  readonly hasPayload: boolean;
  /** Passed through from the approver; never read by Interlock. */
  readonly metadata: JsonObject | undefined;
  /** Who decided (`""` when anonymous; `interlock:expiry` for an expiry). */
  readonly approver: string;
  /** The approver's comment. */
  readonly comment: string;

  constructor(wire: JsonObject) {
    this.interruptId = str(wire["interruptId"]);
    this.status = wire["status"] === "cancelled" ? "cancelled" : "resolved";
    this.hasPayload = Object.hasOwn(wire, "payload");
    this.payload = this.hasPayload ? wire["payload"] : undefined;
    const meta = wire["metadata"];
    this.metadata = typeof meta === "object" && meta !== null && !Array.isArray(meta) ? meta : undefined;
    this.approver = typeof wire["approver"] === "string" ? wire["approver"] : "";
    this.comment = typeof wire["comment"] === "string" ? wire["comment"] : "";
  }

  /** Whether this is a cancellation (a denial or an expiry), never an approval. */
  get cancelled(): boolean {
    return this.status === "cancelled";
  }

  /**
   * `expired` for a cancellation the coordinator's expiry applied (approver
   * {@link EXPIRY_APPROVER}, which no approver can take), else `denied`. It
   * comes from who cancelled, never from `metadata`, which any approver writes.
   */
  get cancelReason(): CancelReason {
    return this.approver === EXPIRY_APPROVER ? "expired" : "denied";
  }
}

/** What became of one decision (the coordinator's answer). */
export interface Verdict {
  outcome: "accepted" | "rejected" | "duplicate";
  decisionId: string;
  runId: string;
  interruptId: string;
  /** The identity the decision was published as (`""`: anonymous). */
  approver: string;
  /** The path it came by (`sdk`, `cli`, `gateway`, ...). */
  via: string;
  /** On rejections, the rejection code. */
  code: string;
  detail: string;
  /** Whether this decision was the last the suspension waited for (the replay is queued). */
  replay: boolean;
  at: string;
  /** The verdict as received. */
  raw: JsonObject;
}

/** The verdict in `raw`, with absent fields as empty values. */
export function verdictFrom(raw: JsonObject): Verdict {
  const s = (k: string): string => str(raw[k]);
  const outcome = s("outcome");
  if (outcome !== "accepted" && outcome !== "rejected" && outcome !== "duplicate") {
    throw new TypeError(`verdict outcome ${JSON.stringify(raw["outcome"])} is not accepted, rejected or duplicate`);
  }
  return {
    outcome,
    decisionId: s("decisionId"),
    runId: s("runId"),
    interruptId: s("interruptId"),
    approver: s("approver"),
    via: s("via"),
    code: s("code"),
    detail: s("detail"),
    replay: raw["replay"] === true,
    at: s("at"),
    raw,
  };
}

/** The run and pass an agent body is running for. */
export interface RunInfo {
  runId: string;
  agent: string;
  pass: number;
  /** The conversation thread (`""`: none). */
  threadId: string;
  /** The W3C trace context of this pass's span. */
  traceparent: string;
}

/** A run's status in its record. */
export type RunStatus = "suspended" | "resuming" | "completed" | "failed";

/** One interrupt of a run, as the run record holds it. */
export interface RunInterrupt extends JsonObject {
  id: string;
  reason: string;
}

/** A run record, as the coordinator keeps it in the runs bucket. */
export class Run {
  readonly runId: string;
  readonly agent: string;
  readonly status: RunStatus;
  readonly pass: number;
  /** The record as stored. */
  readonly raw: JsonObject;

  constructor(raw: JsonObject) {
    this.raw = raw;
    this.runId = str(raw["runId"]);
    this.agent = str(raw["agent"]);
    this.status = str(raw["status"]) as RunStatus;
    this.pass = typeof raw["pass"] === "number" ? raw["pass"] : 0;
  }

  /** Whether the run completed or failed. */
  get finished(): boolean {
    return this.status === "completed" || this.status === "failed";
  }

  /** The result of a completed run. */
  get result(): JsonValue | undefined {
    return this.raw["result"];
  }

  /** The error of a failed run (`""` otherwise). */
  get error(): string {
    return typeof this.raw["error"] === "string" ? this.raw["error"] : "";
  }

  /** Every interrupt of the run, in the order raised. */
  get interrupts(): RunInterrupt[] {
    const ins = this.raw["interrupts"];
    return Array.isArray(ins) ? (ins as RunInterrupt[]) : [];
  }

  /** The interrupts that wait for a decision. */
  pending(): RunInterrupt[] {
    if (this.status !== "suspended") return [];
    return this.interrupts.filter((i) => !Object.hasOwn(i, "decision"));
  }
}

/** An interrupt waiting for a decision, as the pending index holds it (`interlock pending --json`). */
export interface PendingInterrupt extends JsonObject {
  runId: string;
  agent: string;
  id: string;
  reason: string;
  pass: number;
  suspendedAt: string;
}
