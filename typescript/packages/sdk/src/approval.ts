/** A body for the framework adapters whose frameworks ask whether one tool call may run. */

import { callDigest } from "./calldigest.js";
import { Cancelled, ProtocolError } from "./errors.js";
import type { JsonValue } from "./json.js";
import { interrupt, isResuming, toolCall } from "./run.js";
import type { Request } from "./types.js";
import type { AgentBody } from "./worker.js";

/** The decision on one tool call, as an approvals agent's run completes with it. */
export interface ToolApproval {
  approved: boolean;
  approver: string;
  /** The approval's comment, or the denial's comment, or `denied` / `expired`. */
  reason: string;
  /** The approval's payload (falsy ones included); absent when none was sent, or on a cancellation. */
  payload?: JsonValue;
  /** The approver's comment, as given (`""` when none). */
  comment?: string;
  /** On a cancellation: `denied` or `expired`, from who cancelled (never from metadata). */
  cancelReason?: "denied" | "expired";
}

/**
 * The fields of an approval of a gated call (protocol version 2): the
 * digest the decision approved, which the adapter checks against the call
 * it is about to let run, and the call's execution key.
 */
export interface ApprovedCall {
  callDigest?: string;
  executionKey?: string;
}

/**
 * The body of an approvals agent: each run asks once, within the tool call
 * `toolCallId` of its input, with the question `toRequest` makes of the
 * input, and completes with the decision (a cancellation is
 * `approved: false`, never an approval).
 *
 * When the request gates a call (`call`, protocol version 2) the request is
 * made on the replay too, so `interrupt` checks the approved digest
 * ({@link CallMismatch} fails the run, never an approval), and the approval
 * carries `callDigest` and `executionKey` ({@link ApprovedCall}). An approval
 * of edited arguments is `approved: false`: these frameworks can only run the
 * call as asked, and the approvers approved another.
 */
// Q types the question toRequest is given: the adapter's own input type.
// eslint-disable-next-line @typescript-eslint/no-unnecessary-type-parameters
export function toolApprovalBody<Q extends { toolCallId: string }>(toRequest: (q: Q) => Request): AgentBody {
  return (input): ToolApproval => {
    const q = input as Q;
    return toolCall(q.toolCallId, () => {
      try {
        const req = toRequest(q);
        const d = interrupt(req.call || !isResuming() ? req : {});
        const a: ToolApproval = { approved: true, approver: d.approver, reason: d.comment, comment: d.comment };
        if (d.hasPayload && d.payload !== undefined) a.payload = d.payload;
        if (!req.call) return a;
        if (d.arguments !== undefined) {
          return {
            approved: false,
            approver: d.approver,
            reason: "approved with edited arguments, which this framework cannot run",
            comment: d.comment,
          };
        }
        const out: ToolApproval & ApprovedCall = { ...a, callDigest: d.callDigest };
        if (d.executionKey) out.executionKey = d.executionKey;
        return out;
      } catch (e) {
        if (e instanceof Cancelled) {
          return { approved: false, approver: e.approver, reason: e.comment || e.reason, comment: e.comment, cancelReason: e.reason };
        }
        throw e;
      }
    });
  };
}

/**
 * Whether a completed approval run's answer lets the call of `tool` with
 * `args` run: true when it approved no particular call (a version 1
 * approval, or a request without `call`), else only when `args` have the
 * approved digest. The check an adapter makes just before letting the
 * framework run the call; inside the agent it stops mistakes, not a hostile
 * agent.
 */
export function approvedCallMatches(answer: ApprovedCall | undefined, tool: string, args: unknown): boolean {
  if (answer?.callDigest === undefined) return true;
  try {
    return callDigest(tool, args === null ? undefined : args) === answer.callDigest;
  } catch (e) {
    if (e instanceof ProtocolError) return false;
    throw e;
  }
}
