/**
 * Mastra on Interlock: a tool that needs approval (`requireApproval`, or
 * `requireToolApproval` on the call) or that suspends itself
 * (`context.agent.suspend(payload)`) suspends the Mastra run; the question
 * becomes a small Interlock run (decided from the CLI, the inbox, Slack or
 * any client), and its decision approves or declines the tool call
 * (`approveToolCallGenerate` / `declineToolCallGenerate`), or resumes the
 * suspended tool with the decision's payload as Mastra's resume data
 * (`resumeGenerate`), one suspension after another until the generation
 * ends.
 *
 * The question and the decision live in JetStream: asking again about a
 * decided tool call (a restarted process) gets the decision made meanwhile.
 * Mastra keeps the suspended run's snapshot in its own storage: give the
 * Mastra instance a persistent store (such as `LibSQLStore` of
 * `@mastra/libsql` on a file) for a resume after a restart.
 */

import { createHash } from "node:crypto";

import {
  finished,
  RunNotFound,
  Timeout,
  toolApprovalBody,
  type AgentBody,
  type Client,
  type JsonObject,
  type JsonValue,
  type Request,
  type Run,
  type ToolApproval,
} from "@interlock/sdk";

/** The default approvals agent name. */
export const APPROVALS_AGENT = "mastra_approvals";

/** What the approvals agent is asked: one tool call, to approve, or (with `suspendPayload`) to answer a tool's suspension. */
export interface ApprovalQuestion {
  toolCallId: string;
  toolName: string;
  args: JsonValue;
  /** The payload the tool suspended with (`context.agent.suspend(payload)`); absent for an approval. */
  suspendPayload?: JsonValue;
  /** The tool's `resumeSchema` as JSON Schema (Mastra's), when it has one. */
  resumeSchema?: JsonValue;
}

/** The run id of the question about tool call `toolCallId`: `mastra-` and 32 hex digits of SHA-256 of its id. */
export function approvalRunId(toolCallId: string): string {
  return "mastra-" + createHash("sha256").update(toolCallId).digest("hex").slice(0, 32);
}

/**
 * The run id of the question about a tool's suspension: `mastra-` and 32 hex
 * digits of SHA-256 of the call id and the suspend payload's JSON (a tool
 * that suspends again within one call with another payload asks anew).
 */
export function suspensionRunId(toolCallId: string, suspendPayload: unknown): string {
  const h = createHash("sha256").update("suspend\0").update(toolCallId).update("\0").update(JSON.stringify(suspendPayload ?? null));
  return "mastra-" + h.digest("hex").slice(0, 32);
}

/**
 * The default question. An approval: "Run <tool>(<args>)?", reason
 * `tool_call`. A suspension: the suspend payload's `message` (a string),
 * else "<tool>(<args>) asks: <payload>", reason `input_required`, not
 * `sensitive` (the answer travels back as the question run's result), the
 * tool's `resumeSchema` as the response schema (so Interlock refuses an
 * answer that does not fit it). Tool, arguments (and the suspend payload)
 * under `metadata.mastra`.
 */
export function defaultRequest(q: ApprovalQuestion): Request {
  if (q.suspendPayload !== undefined) {
    const p = q.suspendPayload;
    const text =
      typeof p === "object" && p !== null && !Array.isArray(p) && typeof p["message"] === "string"
        ? p["message"]
        : `${q.toolName}(${JSON.stringify(q.args).slice(0, 1000)}) asks: ${JSON.stringify(p).slice(0, 1000)}`;
    const req: Request = {
      message: text,
      reason: "input_required",
      sensitive: false,
      metadata: { mastra: { tool: q.toolName, args: q.args, suspendPayload: p } },
    };
    const schema = responseSchemaOf(q.resumeSchema);
    if (schema) req.responseSchema = schema;
    return req;
  }
  return {
    message: `Run ${q.toolName}(${JSON.stringify(q.args).slice(0, 2000)})?`,
    reason: "tool_call",
    metadata: { mastra: { tool: q.toolName, args: q.args } },
  };
}

function responseSchemaOf(s: JsonValue | undefined): JsonObject | undefined {
  if (typeof s !== "object" || s === null || Array.isArray(s)) return undefined;
  const rest = { ...s }; // Mastra's is draft-07; the keywords it uses are the same
  delete rest["$schema"];
  return Object.keys(rest).length > 0 ? rest : undefined;
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

interface AskOptions {
  agent?: string;
  timeoutMs?: number;
}

/** Start the question (unless it was asked) and wait for its run to end; `undefined` when no decision came in time. */
async function decided(client: Client, runId: string, question: ApprovalQuestion, options: AskOptions): Promise<Run | undefined> {
  let rec: Run | undefined;
  try {
    rec = await client.run(runId);
  } catch (e) {
    if (!(e instanceof RunNotFound)) throw e;
  }
  if (!rec) await client.start(options.agent ?? APPROVALS_AGENT, question as unknown as JsonObject, { runId });
  try {
    return await client.wait(runId, finished, { timeoutMs: options.timeoutMs ?? 600_000 });
  } catch (e) {
    if (e instanceof Timeout) return undefined;
    throw e;
  }
}

function json(v: unknown): JsonValue {
  return JSON.parse(JSON.stringify(v ?? null)) as JsonValue;
}

/** Ask through Interlock whether a tool call may run, and wait (at most `timeoutMs`) for the decision; no decision in time declines it. */
export async function askApproval(
  client: Client,
  call: { toolCallId: string; toolName: string; args: unknown },
  options: AskOptions = {},
): Promise<Approval> {
  const question: ApprovalQuestion = { toolCallId: call.toolCallId, toolName: call.toolName, args: json(call.args) };
  const rec = await decided(client, approvalRunId(call.toolCallId), question, options);
  if (!rec) return { approved: false, reason: "no decision in time" };
  const answer = rec.result as Partial<ToolApproval> | undefined;
  const reason = answer?.reason || rec.error;
  return { approved: rec.status === "completed" && answer?.approved === true, reason: reason || "denied" };
}

/** The resume data a suspended tool gets when its question was denied, expired, or not decided in time: never an answer. */
export interface CancelledAnswer {
  __interlock__: "cancelled";
  /** `denied` or `expired` (from who cancelled, never from metadata); `timeout` when no decision came in time. */
  reason: "denied" | "expired" | "timeout";
  /** The approver's comment. */
  comment: string;
  /** Who cancelled (`interlock:expiry` for an expiry; `""` for a timeout). */
  approver: string;
}

/** Whether a tool's `resumeData` is a cancellation (see {@link CancelledAnswer}). */
export function isCancelled(resumeData: unknown): resumeData is CancelledAnswer {
  return typeof resumeData === "object" && resumeData !== null && (resumeData as { __interlock__?: unknown }).__interlock__ === "cancelled";
}

/**
 * Ask through Interlock for the answer to a tool's suspension, and wait (at
 * most `timeoutMs`) for it: the resume data is the decision's payload
 * (falsy ones included; `true` when it has none), or a
 * {@link CancelledAnswer} when it was denied, expired or not decided in time.
 */
export async function askResume(
  client: Client,
  call: { toolCallId: string; toolName: string; args: unknown; suspendPayload: unknown; resumeSchema?: unknown },
  options: AskOptions = {},
): Promise<JsonValue | CancelledAnswer> {
  const question: ApprovalQuestion = {
    toolCallId: call.toolCallId,
    toolName: call.toolName,
    args: json(call.args),
    suspendPayload: json(call.suspendPayload),
  };
  let schema = call.resumeSchema;
  if (typeof schema === "string") {
    try {
      schema = JSON.parse(schema) as unknown;
    } catch {
      schema = undefined;
    }
  }
  if (typeof schema === "object" && schema !== null) question.resumeSchema = json(schema);
  const rec = await decided(client, suspensionRunId(call.toolCallId, question.suspendPayload), question, options);
  if (!rec) return { __interlock__: "cancelled", reason: "timeout", comment: "no decision in time", approver: "" };
  const answer = rec.result as Partial<ToolApproval> | undefined;
  if (rec.status === "completed" && answer?.approved === true) return answer.payload === undefined ? true : answer.payload;
  return {
    __interlock__: "cancelled",
    reason: answer?.cancelReason ?? "denied",
    comment: answer?.comment ?? rec.error,
    approver: answer?.approver ?? "",
  };
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
  resumeGenerate(resumeData: unknown, options: { runId: string; toolCallId?: string }): Promise<O>;
}

/**
 * Take a generation that may have suspended on tool-call approvals or tool
 * suspensions to its end: each approval is asked through Interlock
 * ({@link askApproval}) and the tool call approved or declined with the
 * decision's reason; each suspension ({@link askResume}) resumes the tool
 * with the decision's payload as its `resumeData` (a {@link CancelledAnswer}
 * when denied, expired or not decided in time).
 *
 * `output` may also be what a process kept of a suspended generation
 * (`finishReason`, `runId`, `suspendPayload`) to finish it after a
 * restart, with an agent whose Mastra instance has the same persistent
 * storage.
 *
 * ```ts
 * const out = await finishWithApprovals(agent, await agent.generate(prompt, { requireToolApproval: true }), { client });
 * ```
 */
export async function finishWithApprovals<O extends SuspendableOutput>(
  agent: ApprovableAgent<O>,
  output: O | SuspendableOutput,
  options: { client: Client; agent?: string; timeoutMs?: number; maxApprovals?: number },
): Promise<O> {
  let out = output;
  for (let n = 0; out.finishReason === "suspended"; n++) {
    if (n >= (options.maxApprovals ?? 100)) throw new Error(`more than ${options.maxApprovals ?? 100} tool approvals in one generation`);
    const p = (out.suspendPayload ?? {}) as { toolCallId?: unknown; toolName?: unknown; args?: unknown; suspendPayload?: unknown; resumeSchema?: unknown };
    if (typeof out.runId !== "string" || typeof p.toolCallId !== "string") {
      throw new Error("the generation suspended without a run id and a tool call id: not a tool approval or suspension");
    }
    const toolName = typeof p.toolName === "string" ? p.toolName : "tool";
    if ("suspendPayload" in p) {
      const resumeData = await askResume(
        options.client,
        { toolCallId: p.toolCallId, toolName, args: p.args, suspendPayload: p.suspendPayload, resumeSchema: p.resumeSchema },
        options,
      );
      out = await agent.resumeGenerate(resumeData, { runId: out.runId, toolCallId: p.toolCallId });
      continue;
    }
    const approval = await askApproval(
      options.client,
      { toolCallId: p.toolCallId, toolName, args: p.args },
      options,
    );
    out = approval.approved
      ? await agent.approveToolCallGenerate({ runId: out.runId, toolCallId: p.toolCallId })
      : await agent.declineToolCallGenerate({ runId: out.runId, toolCallId: p.toolCallId, reason: approval.reason });
  }
  return out as O; // the agent's output, or the one given when it had not suspended
}
