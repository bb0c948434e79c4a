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

import type { LanguageModelMiddleware } from "ai";

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
  return toolApprovalBody(options.toRequest ?? defaultRequest);
}

/** Options of {@link interlockToolApproval}. */
export interface ToolApprovalOptions {
  /** The client that starts the question and reads its decision. */
  client: Client;
  /** The approvals agent (default {@link APPROVALS_AGENT}). */
  agent?: string;
  /**
   * `false`: do not wait. A decided call is answered at once; an undecided
   * one is asked (if it was not) and answered `user-approval`, so the
   * generation ends with a tool approval request for each of the step's
   * undecided calls, all asked at once. Continue it with the messages
   * {@link interlockApprovalResponses} gives once they are decided.
   * Default `true`: wait for the decision.
   */
  wait?: boolean;
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
): (o: { toolCall: { toolCallId: string; toolName: string; input: unknown } }) => Promise<ApprovalStatus | "user-approval"> {
  const agent = options.agent ?? APPROVALS_AGENT;
  const timeoutMs = options.timeoutMs ?? 600_000;
  return async ({ toolCall: call }) => {
    const runId = approvalRunId(call.toolCallId);
    let rec = await ask(options.client, agent, call);
    if (rec?.finished) return statusOf(rec);
    if (options.wait === false) return "user-approval";
    try {
      rec = await options.client.wait(runId, finished, { timeoutMs });
    } catch (e) {
      if (e instanceof Timeout) return { type: "denied", reason: "no decision in time" };
      throw e;
    }
    return statusOf(rec);
  };
}

/** The question's run record, or `undefined` once it is asked for the first time (it was not). */
async function ask(client: Client, agent: string, call: { toolCallId: string; toolName: string; input: unknown }): Promise<Run | undefined> {
  const runId = approvalRunId(call.toolCallId);
  try {
    return await client.run(runId);
  } catch (e) {
    if (!(e instanceof RunNotFound)) throw e;
  }
  const question: ApprovalQuestion = {
    toolCallId: call.toolCallId,
    toolName: call.toolName,
    input: JSON.parse(JSON.stringify(call.input ?? null)) as JsonValue,
  };
  await client.start(agent, question, { runId });
  return undefined;
}

function statusOf(rec: Run): ApprovalStatus {
  const answer = rec.result as Partial<ApprovalAnswer> | undefined;
  if (rec.status === "completed" && answer?.approved === true) {
    return answer.reason ? { type: "approved", reason: answer.reason } : { type: "approved" };
  }
  return { type: "denied", reason: answer?.reason || rec.error || "denied" };
}

/** A message as the AI SDK keeps it (`ModelMessage`), read structurally. */
export interface MessageLike {
  role: string;
  content: unknown;
}

interface Part {
  type?: unknown;
  approvalId?: unknown;
  toolCallId?: unknown;
  toolName?: unknown;
  input?: unknown;
}

function partsOf(m: MessageLike): Part[] {
  return Array.isArray(m.content) ? (m.content as Part[]) : [];
}

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a ?? null) === JSON.stringify(b ?? null);
}

/**
 * The messages to continue a generation with (after one that ended on tool
 * approval requests, with `wait: false`): `messages` without any
 * `tool-approval-response` a client put in them, and a tool message with a
 * response for each approval request whose Interlock question is decided.
 * A response is never taken from the client: each comes from the decision
 * of the question about the request's tool call, and only when the
 * question asked was about that call's tool and input (otherwise it is
 * denied). Requests still undecided get no response yet.
 */
export async function interlockApprovalResponses<M extends MessageLike>(client: Client, messages: readonly M[]): Promise<M[]> {
  const kept = messages
    .map((m) => (Array.isArray(m.content) ? { ...m, content: partsOf(m).filter((p) => p.type !== "tool-approval-response") } : m))
    .filter((m) => !(m.role === "tool" && Array.isArray(m.content) && m.content.length === 0));
  const responses: JsonObject[] = [];
  for (const m of kept) {
    const parts = partsOf(m);
    for (const req of parts.filter((p) => p.type === "tool-approval-request")) {
      if (typeof req.approvalId !== "string" || typeof req.toolCallId !== "string") continue;
      const call = parts.find((p) => p.type === "tool-call" && p.toolCallId === req.toolCallId);
      let rec: Run;
      try {
        rec = await client.run(approvalRunId(req.toolCallId));
      } catch (e) {
        if (e instanceof RunNotFound) continue;
        throw e;
      }
      if (!rec.finished) continue;
      const asked = rec.raw["input"] as Partial<ApprovalQuestion> | undefined;
      let status: ApprovalStatus;
      if (!call || asked?.toolCallId !== req.toolCallId || asked.toolName !== call.toolName || !sameJson(asked.input, call.input)) {
        status = { type: "denied", reason: "the approval does not match the question asked" };
      } else {
        status = statusOf(rec);
      }
      const response: JsonObject = { type: "tool-approval-response", approvalId: req.approvalId, approved: status.type === "approved" };
      if (status.reason) response["reason"] = status.reason;
      responses.push(response);
    }
  }
  if (responses.length === 0) return kept;
  return [...kept, { role: "tool", content: responses } as unknown as M];
}

/** Options of {@link interlockApprovalMiddleware}. */
export interface ApprovalMiddlewareOptions {
  /** The client that starts the questions. */
  client: Client;
  /** The approvals agent (default {@link APPROVALS_AGENT}); the same as the tool approval function's. */
  agent?: string;
  /** Which tool calls to ask about (default: every call the SDK runs, not the provider's). Ask about the same ones the tool approval function asks about. */
  needsApproval?: (call: { toolCallId: string; toolName: string; input: unknown }) => boolean;
}

interface ToolCallPart {
  type: "tool-call";
  toolCallId: string;
  toolName: string;
  input: string;
  providerExecuted?: boolean;
}

function isToolCall(p: unknown): p is ToolCallPart {
  const q = p as Partial<ToolCallPart> | null;
  return typeof q === "object" && q !== null && q.type === "tool-call" && typeof q.toolCallId === "string" && typeof q.toolName === "string";
}

/**
 * A language model middleware (`wrapLanguageModel({ model, middleware })`)
 * that asks about all of a step's tool calls at once, as soon as the model
 * has made them: the AI SDK calls the tool approval function for a step's
 * calls one at a time, so the blocking {@link interlockToolApproval} alone
 * asks the second only once the first is decided. With the middleware, the
 * questions of a step's parallel calls are all open together, may be
 * decided in any order, and the tool approval function finds each asked.
 *
 * With `streamText`, the tool calls the middleware asks about are held back
 * until the model's stream ends (each then goes on with its question
 * asked); text and tool input deltas pass at once.
 *
 * The question records the model's input as parsed JSON: a tool whose input
 * schema changes the input (defaults, transforms) is asked about what the
 * model sent.
 */
export function interlockApprovalMiddleware(options: ApprovalMiddlewareOptions): LanguageModelMiddleware {
  const agent = options.agent ?? APPROVALS_AGENT;
  const needs = options.needsApproval ?? (() => true);
  const wanted = (p: unknown): p is ToolCallPart => {
    if (!isToolCall(p) || p.providerExecuted === true) return false;
    let input: unknown;
    try {
      input = JSON.parse(p.input || "{}");
    } catch {
      return false; // the SDK marks it invalid and asks nothing
    }
    return needs({ toolCallId: p.toolCallId, toolName: p.toolName, input });
  };
  const askAll = async (calls: readonly ToolCallPart[]): Promise<void> => {
    await Promise.all(
      calls.map((c) => ask(options.client, agent, { toolCallId: c.toolCallId, toolName: c.toolName, input: JSON.parse(c.input || "{}") as unknown })),
    );
  };
  return {
    specificationVersion: "v4",
    wrapGenerate: async ({ doGenerate }) => {
      const result = await doGenerate();
      await askAll((result.content as unknown[]).filter(wanted));
      return result;
    },
    wrapStream: async ({ doStream }) => {
      const result = await doStream();
      type Chunk = typeof result.stream extends ReadableStream<infer C> ? C : never;
      const held: Chunk[] = [];
      const release = async (c: TransformStreamDefaultController<Chunk>): Promise<void> => {
        const calls = held.splice(0);
        await askAll(calls.filter(wanted));
        for (const call of calls) c.enqueue(call);
      };
      const stream = result.stream.pipeThrough(
        new TransformStream<Chunk, Chunk>({
          async transform(chunk, c) {
            if (wanted(chunk)) {
              held.push(chunk);
              return;
            }
            if ((chunk as { type?: unknown }).type === "finish") await release(c);
            c.enqueue(chunk);
          },
          flush: release,
        }),
      );
      return { ...result, stream };
    },
  };
}
