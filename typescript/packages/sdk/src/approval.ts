/** A body for the framework adapters whose frameworks ask whether one tool call may run. */

import { Cancelled } from "./errors.js";
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
 * The body of an approvals agent: each run asks once, within the tool call
 * `toolCallId` of its input, with the question `toRequest` makes of the
 * input, and completes with the decision (a cancellation is
 * `approved: false`, never an approval).
 */
// Q types the question toRequest is given: the adapter's own input type.
// eslint-disable-next-line @typescript-eslint/no-unnecessary-type-parameters
export function toolApprovalBody<Q extends { toolCallId: string }>(toRequest: (q: Q) => Request): AgentBody {
  return (input): ToolApproval => {
    const q = input as Q;
    return toolCall(q.toolCallId, () => {
      try {
        const d = interrupt(isResuming() ? {} : toRequest(q));
        const a: ToolApproval = { approved: true, approver: d.approver, reason: d.comment, comment: d.comment };
        if (d.hasPayload && d.payload !== undefined) a.payload = d.payload;
        return a;
      } catch (e) {
        if (e instanceof Cancelled) {
          return { approved: false, approver: e.approver, reason: e.comment || e.reason, comment: e.comment, cancelReason: e.reason };
        }
        throw e;
      }
    });
  };
}
