/**
 * The Vercel AI SDK on Interlock: a tool approval function (`toolApproval`
 * of `generateText`, `streamText` or a `ToolLoopAgent`) whose question is an
 * Interlock run and whose answer is that run's decision. The question and
 * the decision live in JetStream: a process that restarts and asks again
 * for the same tool call gets the decision made meanwhile, and the decision
 * is read from the run's record, never from a client's messages.
 *
 * Each question is a small run of the approvals agent (register
 * {@link approvalAgent} with a `Worker`), with a run id derived from the
 * tool call's id; its one interrupt is `interruptId(run, toolCallId, 0)`.
 */

import { createHash } from "node:crypto";

import {
  Cancelled,
  finished,
  interrupt,
  isResuming,
  RunNotFound,
  Timeout,
  toolCall,
  type AgentBody,
  type Client,
  type JsonObject,
  type JsonValue,
  type Request,
  type Run,
} from "@interlock/sdk";

/** The default approvals agent name. */
export const APPROVALS_AGENT = "ai_sdk_approvals";

/** What the approvals agent is asked: one tool call. */
export interface ApprovalQuestion extends JsonObject {
  toolCallId: string;
  toolName: string;
  input: JsonValue;
}

/** The approval run's result. */
export interface ApprovalAnswer extends JsonObject {
  approved: boolean;
  approver: string;
  /** The denial's comment, or `denied` / `expired`. */
  reason: string;
}

/** The status the AI SDK takes from a tool approval function. */
export type ApprovalStatus = { type: "approved"; reason?: string } | { type: "denied"; reason?: string };

/** The run id of the question about tool call `toolCallId`: `aisdk-` and 32 hex digits of SHA-256 of its id. */
export function approvalRunId(toolCallId: string): string {
  return "aisdk-" + createHash("sha256").update(toolCallId).digest("hex").slice(0, 32);
}

/** The default question for a tool call: "Run <tool>(<input>)?", reason `tool_call`, tool and input under `metadata.aiSdk`. */
export function defaultRequest(q: ApprovalQuestion): Request {
  return {
    message: `Run ${q.toolName}(${JSON.stringify(q.input).slice(0, 2000)})?`,
    reason: "tool_call",
    metadata: { aiSdk: { tool: q.toolName, input: q.input } },
  };
}

/** The approvals agent's body: one interrupt per tool call, answered approved or denied (a cancellation, never an approval). */
export function approvalAgent(options: { toRequest?: (q: ApprovalQuestion) => Request } = {}): AgentBody {
  const toRequest = options.toRequest ?? defaultRequest;
  return (input): ApprovalAnswer => {
    const q = input as ApprovalQuestion;
    return toolCall(q.toolCallId, () => {
      try {
        const d = interrupt(isResuming() ? {} : toRequest(q));
        return { approved: true, approver: d.approver, reason: d.comment };
      } catch (e) {
        if (e instanceof Cancelled) return { approved: false, approver: e.approver, reason: e.comment || e.reason };
        throw e;
      }
    });
  };
}

/** Options of {@link interlockToolApproval}. */
export interface ToolApprovalOptions {
  /** The client that starts the question and reads its decision. */
  client: Client;
  /** The approvals agent (default {@link APPROVALS_AGENT}). */
  agent?: string;
  /** How long to wait for the decision (default 10 minutes); no decision in time is a denial for this call, and the question stays open. */
  timeoutMs?: number;
}

/**
 * A tool approval function: asks through Interlock whether the tool call may
 * run, waits for the decision, and answers `approved` or `denied` (with the
 * approver's comment, or `denied` / `expired`, as the reason).
 */
export function interlockToolApproval(
  options: ToolApprovalOptions,
): (o: { toolCall: { toolCallId: string; toolName: string; input: unknown } }) => Promise<ApprovalStatus> {
  const agent = options.agent ?? APPROVALS_AGENT;
  const timeoutMs = options.timeoutMs ?? 600_000;
  return async ({ toolCall: call }) => {
    const runId = approvalRunId(call.toolCallId);
    let rec: Run | undefined;
    try {
      rec = await options.client.run(runId);
    } catch (e) {
      if (!(e instanceof RunNotFound)) throw e;
    }
    if (!rec) {
      const question: ApprovalQuestion = {
        toolCallId: call.toolCallId,
        toolName: call.toolName,
        input: JSON.parse(JSON.stringify(call.input ?? null)) as JsonValue,
      };
      await options.client.start(agent, question, { runId });
    }
    try {
      rec = await options.client.wait(runId, finished, { timeoutMs });
    } catch (e) {
      if (e instanceof Timeout) return { type: "denied", reason: "no decision in time" };
      throw e;
    }
    const answer = rec.result as Partial<ApprovalAnswer> | undefined;
    if (rec.status === "completed" && answer?.approved === true) {
      return answer.reason ? { type: "approved", reason: answer.reason } : { type: "approved" };
    }
    return { type: "denied", reason: answer?.reason || rec.error || "denied" };
  };
}
