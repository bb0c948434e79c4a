/**
 * Mastra on Interlock: a tool that needs approval (`requireApproval`, or
 * `requireToolApproval` on the call) suspends the Mastra run; the question
 * becomes a small Interlock run (decided from the CLI, the inbox, Slack or
 * any client), and its decision approves or declines the tool call
 * (`approveToolCallGenerate` / `declineToolCallGenerate`), one suspension
 * after another until the generation ends.
 *
 * The question and the decision live in JetStream: asking again about a
 * decided tool call (a restarted process) gets the decision made meanwhile.
 * Mastra keeps the suspended run's snapshot in its own storage: give the
 * Mastra instance a persistent store for a resume after a restart.
 */

import { createHash } from "node:crypto";

import {
  finished,
  RunNotFound,
  Timeout,
  approvedCallMatches,
  toolApprovalBody,
  type ApprovedCall,
  type AgentBody,
  type Client,
  type JsonObject,
  type JsonValue,
  type Request,
  type Run,
} from "@interlock/sdk";

/** The default approvals agent name. */
export const APPROVALS_AGENT = "mastra_approvals";

/** What the approvals agent is asked: one tool call. */
export interface ApprovalQuestion extends JsonObject {
  toolCallId: string;
  toolName: string;
  args: JsonValue;
}

/** The run id of the question about tool call `toolCallId`: `mastra-` and 32 hex digits of SHA-256 of its id. */
export function approvalRunId(toolCallId: string): string {
  return "mastra-" + createHash("sha256").update(toolCallId).digest("hex").slice(0, 32);
}

/** The default question: "Run <tool>(<args>)?", reason `tool_call`, tool and arguments under `metadata.mastra`. */
export function defaultRequest(q: ApprovalQuestion): Request {
  return {
    message: `Run ${q.toolName}(${JSON.stringify(q.args).slice(0, 2000)})?`,
    reason: "tool_call",
    metadata: { mastra: { tool: q.toolName, args: q.args } },
    // Protocol version 2: votes are bound to the call's digest, checked
    // again before the call runs. Set `policy` in your own toRequest.
    call: q.args === null ? { tool: q.toolName } : { tool: q.toolName, arguments: q.args },
  };
}

/** The approvals agent's body: one interrupt per tool call, answered approved or declined (a cancellation, never an approval). */
export function approvalAgent(options: { toRequest?: (q: ApprovalQuestion) => Request } = {}): AgentBody {
  return toolApprovalBody(options.toRequest ?? defaultRequest);
}

/** The decision on one tool call. */
export interface Approval {
  approved: boolean;
  reason: string;
}

/** Ask through Interlock whether a tool call may run, and wait (at most `timeoutMs`) for the decision; no decision in time declines it. */
export async function askApproval(
  client: Client,
  call: { toolCallId: string; toolName: string; args: unknown },
  options: { agent?: string; timeoutMs?: number } = {},
): Promise<Approval> {
  const runId = approvalRunId(call.toolCallId);
  let rec: Run | undefined;
  try {
    rec = await client.run(runId);
  } catch (e) {
    if (!(e instanceof RunNotFound)) throw e;
  }
  if (!rec) {
    const question: ApprovalQuestion = {
      toolCallId: call.toolCallId,
      toolName: call.toolName,
      args: JSON.parse(JSON.stringify(call.args ?? null)) as JsonValue,
    };
    await client.start(options.agent ?? APPROVALS_AGENT, question, { runId });
  }
  try {
    rec = await client.wait(runId, finished, { timeoutMs: options.timeoutMs ?? 600_000 });
  } catch (e) {
    if (e instanceof Timeout) return { approved: false, reason: "no decision in time" };
    throw e;
  }
  const answer = rec.result as (Partial<{ approved: boolean; reason: string }> & ApprovedCall) | undefined;
  const reason = answer?.reason || rec.error;
  const approved = rec.status === "completed" && answer?.approved === true;
  // The call about to run must be the one approved.
  if (approved && !approvedCallMatches(answer, call.toolName, JSON.parse(JSON.stringify(call.args ?? null)) as unknown)) {
    return { approved: false, reason: "the approval was for a different call" };
  }
  return { approved, reason: reason || "denied" };
}

/** What the adapter reads of a Mastra generation's output. */
export interface SuspendableOutput {
  finishReason?: string | undefined;
  runId?: string | undefined;
  suspendPayload?: unknown;
}

/** The part of a Mastra agent the adapter uses. */
export interface ApprovableAgent<O extends SuspendableOutput> {
  approveToolCallGenerate(options: { runId: string; toolCallId?: string }): Promise<O>;
  declineToolCallGenerate(options: { runId: string; toolCallId?: string; reason?: string }): Promise<O>;
}

/**
 * Take a generation that may have suspended on tool-call approvals to its
 * end: each approval is asked through Interlock ({@link askApproval}) and
 * the tool call approved or declined with the decision's reason.
 *
 * ```ts
 * const out = await finishWithApprovals(agent, await agent.generate(prompt, { requireToolApproval: true }), { client });
 * ```
 */
export async function finishWithApprovals<O extends SuspendableOutput>(
  agent: ApprovableAgent<O>,
  output: O,
  options: { client: Client; agent?: string; timeoutMs?: number; maxApprovals?: number },
): Promise<O> {
  let out = output;
  for (let n = 0; out.finishReason === "suspended"; n++) {
    if (n >= (options.maxApprovals ?? 100)) throw new Error(`more than ${options.maxApprovals ?? 100} tool approvals in one generation`);
    const p = (out.suspendPayload ?? {}) as { toolCallId?: unknown; toolName?: unknown; args?: unknown };
    if (typeof out.runId !== "string" || typeof p.toolCallId !== "string") {
      throw new Error("the generation suspended without a run id and a tool call id: not a tool approval");
    }
    const approval = await askApproval(
      options.client,
      { toolCallId: p.toolCallId, toolName: typeof p.toolName === "string" ? p.toolName : "tool", args: p.args },
      options,
    );
    out = approval.approved
      ? await agent.approveToolCallGenerate({ runId: out.runId, toolCallId: p.toolCallId })
      : await agent.declineToolCallGenerate({ runId: out.runId, toolCallId: p.toolCallId, reason: approval.reason });
  }
  return out;
}
