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

/** The approver of decisions an operator rule made (protocol version 2). */
export const POLICY_APPROVER = "interlock:policy";

/**
 * A tool call an interrupt gates (protocol version 2): the tool's name and
 * the arguments it is called with (any JSON value; left out is `{}`). The
 * interrupt carries its call digest; every vote is bound to it, and on the
 * replay `interrupt` checks that the call about to run is the approved one
 * ({@link CallMismatch} otherwise).
 */
export interface Call {
  tool: string;
  arguments?: JsonValue;
}

/**
 * How many votes decide an interrupt (protocol version 2). Operator rules
 * can make it stricter, never weaker.
 */
export interface Policy {
  /** Approvals of distinct identities, for the same answer, that resolve it (default 1, at most 32). */
  approvals?: number;
  /** Denials of distinct identities that cancel it (default 1, at most 32). */
  denials?: number;
  /** The run's requester may vote (default false). */
  allowRequester?: boolean;
  /** A voter may change or withdraw its vote while the interrupt is open (default false). */
  allowChange?: boolean;
}

/**
 * One vote on an interrupt with a policy, as the final decision carries it
 * (protocol version 2): who, when (`at`; `seq` its place in the decisions
 * stream) and what (status, payload, comment, the call it approved).
 */
export interface Vote {
  decisionId: string;
  approver: string;
  status: string;
  at: string;
  payload?: JsonValue;
  comment: string;
  metadata?: JsonObject;
  /** The digest of the call the vote approved (`""`: an interrupt without a call). */
  callDigest: string;
  /** The voter's edited arguments, if any. */
  arguments?: JsonValue;
  seq: number;
  via: string;
}

/** Where an interrupt's votes stand after a vote (protocol version 2). */
export interface Tally {
  /** Approvals for the answer this vote approved (after a denial: the largest group). */
  approvals: number;
  approvalsNeeded: number;
  denials: number;
  denialsNeeded: number;
  /** The digest the counted approvals approve. */
  callDigest: string;
  /** Named eligible approvers who have not voted, and `group:<name>` for each group. */
  waitingOn: string[];
}

function num(v: JsonValue | undefined): number {
  return typeof v === "number" ? v : 0;
}

/** The vote in `raw`. */
export function voteFrom(raw: JsonObject): Vote {
  const v: Vote = {
    decisionId: str(raw["decisionId"]),
    approver: str(raw["approver"]),
    status: str(raw["status"]),
    at: str(raw["at"]),
    comment: str(raw["comment"]),
    callDigest: str(raw["callDigest"]),
    seq: num(raw["seq"]),
    via: str(raw["via"]),
  };
  if (Object.hasOwn(raw, "payload")) v.payload = raw["payload"];
  const meta = raw["metadata"];
  if (typeof meta === "object" && meta !== null && !Array.isArray(meta)) v.metadata = meta;
  if (Object.hasOwn(raw, "arguments")) v.arguments = raw["arguments"];
  return v;
}

/** The tally in `raw`. */
export function tallyFrom(raw: JsonObject): Tally {
  const w = raw["waitingOn"];
  return {
    approvals: num(raw["approvals"]),
    approvalsNeeded: num(raw["approvalsNeeded"]),
    denials: num(raw["denials"]),
    denialsNeeded: num(raw["denialsNeeded"]),
    callDigest: str(raw["callDigest"]),
    waitingOn: Array.isArray(w) ? w.filter((x): x is string => typeof x === "string") : [],
  };
}

/** A sentence saying what `t` still needs ("1 of 2 approvals for this answer; 0 of 1 denials; waiting on cy"). */
export function remaining(t: Tally): string {
  let s = `${t.approvals} of ${t.approvalsNeeded} approvals`;
  if (t.approvalsNeeded > 1) s += " for this answer";
  s += `; ${t.denials} of ${t.denialsNeeded} denials`;
  if (t.waitingOn.length > 0) s += `; waiting on ${t.waitingOn.join(", ")}`;
  return s;
}

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
 * What an agent asks a person. Read only on the suspend pass, but for
 * `call`: on the replay pass `interrupt` returns the decision, after checking
 * that it approved `call` when the request has one.
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
  /**
   * The tool call this interrupt gates (protocol version 2): approvers see it
   * and vote on its digest; on the replay `interrupt` checks that this call
   * (give it on the replay too) is the approved one.
   */
  call?: Call;
  /** A quorum (protocol version 2): how many approvals and denials decide. */
  policy?: Policy;
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
  /** The digest of the call this decision approved (protocol version 2; `""`: none). */
  readonly callDigest: string;
  /** The approvers' edited arguments (`undefined`: the call's own). */
  readonly arguments: JsonValue | undefined;
  /** Every vote counted, oldest first: who, when, what (protocol version 2). */
  readonly votes: readonly Vote[];
  /**
   * The approved call's execution key (protocol version 2; `""`: none): the
   * same on every replay of the run, unguessable without the coordinator's
   * key. Pass it to the outside system as the idempotency key of the call's
   * side effect.
   */
  readonly executionKey: string;
  /** The operator rule that made this decision (approver `interlock:policy`). */
  readonly rule: string;

  constructor(wire: JsonObject) {
    this.interruptId = str(wire["interruptId"]);
    // Only "resolved" is an approval: anything else (the decoders refuse it
    // in a replay) reads as cancelled, never as resolved.
    this.status = wire["status"] === "resolved" ? "resolved" : "cancelled";
    this.hasPayload = Object.hasOwn(wire, "payload");
    this.payload = this.hasPayload ? wire["payload"] : undefined;
    const meta = wire["metadata"];
    this.metadata = typeof meta === "object" && meta !== null && !Array.isArray(meta) ? meta : undefined;
    this.approver = typeof wire["approver"] === "string" ? wire["approver"] : "";
    this.comment = typeof wire["comment"] === "string" ? wire["comment"] : "";
    this.callDigest = str(wire["callDigest"]);
    this.arguments = Object.hasOwn(wire, "arguments") ? wire["arguments"] : undefined;
    const votes = wire["votes"];
    this.votes = Array.isArray(votes)
      ? votes.filter((v): v is JsonObject => typeof v === "object" && v !== null && !Array.isArray(v)).map(voteFrom)
      : [];
    this.executionKey = str(wire["executionKey"]);
    this.rule = str(wire["rule"]);
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

/**
 * What became of one decision (the coordinator's answer). On an interrupt
 * with a policy (protocol version 2) a decision is a vote: outcome
 * `vote_recorded` says it counts and the interrupt still waits, and `tally`
 * says what is still needed.
 */
export interface Verdict {
  outcome: "accepted" | "rejected" | "duplicate" | "vote_recorded";
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
  /** Where the votes stand, on verdicts about an interrupt with a policy (protocol version 2). */
  tally?: Tally;
  /** The operator rule that made the decision, if one did. */
  rule: string;
  /** The verdict as received. */
  raw: JsonObject;
}

/** The verdict in `raw`, with absent fields as empty values. */
export function verdictFrom(raw: JsonObject): Verdict {
  const s = (k: string): string => str(raw[k]);
  const outcome = s("outcome");
  if (outcome !== "accepted" && outcome !== "rejected" && outcome !== "duplicate" && outcome !== "vote_recorded") {
    throw new TypeError(
      `verdict outcome ${JSON.stringify(raw["outcome"])} is not accepted, rejected, duplicate or vote_recorded`,
    );
  }
  const tally = raw["tally"];
  const v: Verdict = {
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
    rule: s("rule"),
    raw,
  };
  if (typeof tally === "object" && tally !== null && !Array.isArray(tally)) v.tally = tallyFrom(tally);
  return v;
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
