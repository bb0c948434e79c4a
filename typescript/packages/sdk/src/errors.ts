/** Errors of the Interlock SDK. Every one extends {@link InterlockError}. */

import type { Decision, Verdict } from "./types.js";

/** Base class of every error the SDK throws. */
export class InterlockError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A value cannot be a subject token (agent name, run id, approver). */
export class InvalidToken extends InterlockError {}

/** A wire message breaks the protocol; `code` is its rejection code. */
export class ProtocolError extends InterlockError {
  /** The rejection code: `malformed`, `unsupported_version` or `too_large`. */
  readonly code: string;
  /** A sentence saying what is wrong. */
  readonly detail: string;
  constructor(code: string, detail: string) {
    super(`${code}: ${detail}`);
    this.code = code;
    this.detail = detail;
  }
}

/** `interrupt`, `step` or `emit` was called outside a pass of a run. */
export class NotInRun extends InterlockError {}

/** An interrupt request cannot be published; the run fails. */
export class InvalidRequest extends InterlockError {}

/** A request names a tool call other than the one in scope. */
export class ToolCallMismatch extends InvalidRequest {}

/**
 * Control flow: the pass stops on interrupts. Thrown by `interrupt` on the
 * suspend pass; let it propagate out of the agent body (catching it and
 * returning normally still suspends: nothing pending is ever skipped).
 */
export class Suspended extends InterlockError {
  /** The interrupts the pass stops on. */
  readonly interruptIds: readonly string[];
  constructor(interruptIds: readonly string[]) {
    super("suspended on interrupt " + interruptIds.join(", "));
    this.interruptIds = interruptIds;
  }
}

/** Why an interrupt was cancelled: a person denied it, or its deadline passed. */
export type CancelReason = "denied" | "expired";

/**
 * The interrupt's decision is `cancelled`: a denial or an expiry, never an
 * approval. Letting it propagate fails the run. `reason` comes from who
 * cancelled (the coordinator's expiry approver `interlock:expiry`, which no
 * person can take, is `expired`; anyone else `denied`), never from the
 * decision's metadata.
 */
export class Cancelled extends InterlockError {
  readonly decision: Decision;
  readonly interruptId: string;
  readonly approver: string;
  readonly comment: string;
  readonly reason: CancelReason;
  constructor(decision: Decision) {
    const reason = decision.cancelReason;
    let msg = `interrupt ${decision.interruptId} ${reason === "expired" ? "expired" : "cancelled"}`;
    if (decision.approver) msg += ` by ${decision.approver}`;
    if (decision.comment) msg += `: ${decision.comment}`;
    super(msg);
    this.decision = decision;
    this.interruptId = decision.interruptId;
    this.approver = decision.approver;
    this.comment = decision.comment;
    this.reason = reason;
  }
}

/**
 * On the replay, the call about to run is not the call its approvers
 * approved: its digest differs from the decision's `callDigest` (or the
 * decision approved no call). Nothing runs; letting it propagate fails the
 * run (the Go SDK's `ErrCallMismatch`).
 *
 * This check lives inside the agent: it stops mistakes (a prompt that
 * changed, a model that chose other arguments on the replay), not a hostile
 * agent, which can skip it. Only an executor outside the agent (the MCP
 * proxy, or the tool's own service checking the digest and the execution
 * key) enforces an approval.
 */
export class CallMismatch extends InterlockError {
  readonly interruptId: string;
  /** The digest the decision approved (`""`: none). */
  readonly approved: string;
  /** The digest of the call about to run. */
  readonly got: string;
  constructor(interruptId: string, approved: string, got: string) {
    super(
      `interrupt ${interruptId}: call differs from the approved call: approved digest ${approved || "(none)"}, the call about to run has digest ${got}`,
    );
    this.interruptId = interruptId;
    this.approved = approved;
    this.got = got;
  }
}

/** Throw from an agent body to run the pass again later instead of failing the run. */
export class Retry extends InterlockError {}

/** A pass ran over the worker's pass timeout (the `AbortSignal`'s reason). */
export class PassTimeout extends InterlockError {}

/** The worker is stopping and gave up waiting for the pass (the `AbortSignal`'s reason). */
export class WorkerStopping extends InterlockError {}

/** The coordinator rejected a decision; `verdict.code` says why. */
export class Rejected extends InterlockError {
  readonly verdict: Verdict;
  constructor(verdict: Verdict) {
    super(`decision rejected: ${verdict.code}: ${verdict.detail}`);
    this.verdict = verdict;
  }
}

/** No run record exists for the run id (yet: a run has a record once its first pass ends). */
export class RunNotFound extends InterlockError {}

/** A wait (for a verdict, a run's condition, a read) ran out of time. */
export class Timeout extends InterlockError {}
