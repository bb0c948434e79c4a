/**
 * The OpenAI Agents SDK for JS on Interlock: a tool with `needsApproval`
 * waits on an Interlock decision. When a run stops on tool approvals, its
 * `RunState` is kept in a JetStream KV bucket and the Interlock run suspends
 * on one interrupt per approval (all of the turn's in one suspension); once
 * every one is decided, the replay pass loads the state, approves or rejects
 * each item, and runs the agent on from there. The model is not called
 * again for a turn already taken: the stored state is the run's memory.
 *
 * The bucket (`interlock_openai_agents`) is created by `interlock provision`;
 * each state is kept under `<agent>.<run>.<stop>`, keys the agent's own NATS
 * user alone may put and read (deploy/nats/auth.conf, `interlock auth`), and
 * deleted once the run's completion or failure is stored.
 */

import type { NatsConnection } from "@nats-io/nats-core";
import { Kvm, type KV } from "@nats-io/kv";
import { run, RunState, type AgentInputItem, type RunResult, type RunToolApprovalItem } from "@openai/agents-core";

import {
  Cancelled,
  interrupt,
  isResuming,
  onRunFinished,
  Suspended,
  toolCall,
  type AgentBody,
  type Decision,
  type JsonValue,
  type Request,
} from "@interlock/sdk";

/** An agent of any context and output type, as the SDK's own `run` takes. */
export type AnyAgent = Parameters<typeof run>[0];

/** Options of {@link openAIAgentsBody}. */
export interface OpenAIAgentsOptions<TAgent extends AnyAgent = AnyAgent> {
  /** The agent to run (the same definition on every worker: a stored state is loaded against it). */
  agent: TAgent;
  /** The connection whose JetStream keeps the run states. */
  nc: NatsConnection;
  /**
   * The KV bucket of run states (default `interlock_openai_agents`, which
   * `interlock provision` creates; under another prefix, `<prefix>_openai_agents`).
   * The adapter never creates it: it binds without a stream-info call and
   * reads with direct gets naming the key, the calls per-agent permissions allow.
   */
  bucket?: string;
  /** The agent's input from the run's input (default: a string input as is, anything else as JSON text). */
  input?: (input: JsonValue | undefined) => string | AgentInputItem[];
  /** The Interlock request for one tool approval (default: {@link defaultRequest}). Called on the suspend pass only. */
  toRequest?: (item: RunToolApprovalItem) => Request;
  /** The text the model gets for a rejected tool call (default: the approver's comment, else "denied" or "expired"). */
  rejection?: (decision: Decision, reason: "denied" | "expired") => string;
  /** The run's result (default: the final output). */
  output?: (result: RunResult<unknown, TAgent>) => JsonValue;
}

function callId(item: RunToolApprovalItem): string {
  const raw = item.rawItem as { callId?: unknown; id?: unknown };
  if (typeof raw.callId === "string" && raw.callId) return raw.callId;
  if (typeof raw.id === "string" && raw.id) return raw.id;
  throw new Error("a tool approval item without a call id cannot be matched to its decision");
}

function toolName(item: RunToolApprovalItem): string {
  const raw = item.rawItem as { name?: unknown };
  return item.toolName ?? (typeof raw.name === "string" ? raw.name : "tool");
}

/**
 * The default request for a tool approval: "Run <tool>(<arguments>)?",
 * reason `tool_call`, the tool call's id, and its tool name, arguments and
 * agent under `metadata.openai`.
 */
export function defaultRequest(item: RunToolApprovalItem): Request {
  const raw = item.rawItem as { arguments?: unknown };
  const args = typeof raw.arguments === "string" ? raw.arguments : JSON.stringify(raw.arguments ?? null);
  const req: Request = {
    message: `Run ${toolName(item)}(${args.slice(0, 2000)})?`,
    reason: "tool_call",
    metadata: { openai: { tool: toolName(item), arguments: args, agent: item.agent.name } },
  };
  // Protocol version 2: the call itself, so votes are bound to its digest
  // and the replay checks the call it approves is the one approved.
  let parsed: JsonValue | undefined;
  try {
    parsed = JSON.parse(args) as JsonValue;
  } catch {
    parsed = undefined;
  }
  if (parsed !== undefined) req.call = parsed === null ? { tool: toolName(item) } : { tool: toolName(item), arguments: parsed };
  return req;
}

/**
 * An Interlock agent body running `agent` with the OpenAI Agents SDK.
 * Interrupt ids are `interruptId(run, callId, 0)`: the tool call's id is
 * the tool-call scope (call ids must be unique within a run, as the model's
 * are).
 */
export function openAIAgentsBody<TAgent extends AnyAgent>(options: OpenAIAgentsOptions<TAgent>): AgentBody {
  const bucket = options.bucket ?? "interlock_openai_agents";
  const toRequest = options.toRequest ?? defaultRequest;
  const rejection = options.rejection ?? ((d, reason) => d.comment || reason);
  const toInput =
    options.input ??
    ((v: JsonValue | undefined): string => (typeof v === "string" ? v : JSON.stringify(v ?? null)));
  let kv: Promise<KV> | undefined;
  // Bound without a call (no stream info: per-agent permissions allow only
  // the agent's own keys); reads are direct gets naming the key.
  const store = (): Promise<KV> => (kv ??= new Kvm(options.nc).open(bucket, { allow_direct: true }));
  const missing = (e: unknown): Error =>
    new Error(
      `openai-agents: the run states bucket ${bucket} cannot be read (created by \`interlock provision\`; ` +
        `the agent's user needs $KV.${bucket}.<agent>.> and its direct gets): ${(e as Error).message}`,
      { cause: e },
    );

  return async (input, { signal, run: info }) => {
    const states = await store();
    // The latest state stored for this run: stop n is kept under
    // <agent>.<run>.<n>, under the agent's own key prefix.
    const keyOf = (n: number): string => `${info.agent}.${info.runId}.${n}`;
    let stop = -1;
    let stored: string | undefined;
    for (;;) {
      const e = await states.get(keyOf(stop + 1)).catch((err: unknown) => {
        throw missing(err);
      });
      if (!e || e.operation !== "PUT") break;
      stop++;
      stored = e.string();
    }
    // Once the run's end is stored (not before: a retried pass would need
    // them), its states go.
    onRunFinished(async () => {
      for (let n = 0; n <= stop; n++) await states.delete(keyOf(n));
    });
    let state: RunState<unknown, TAgent> | undefined =
      stored === undefined ? undefined : await RunState.fromString(options.agent, stored);
    let result: RunResult<unknown, TAgent> | undefined =
      state === undefined ? await run(options.agent, toInput(input), { signal }) : undefined;
    for (;;) {
      if (result) {
        if (result.interruptions.length === 0) {
          return options.output ? options.output(result) : (JSON.parse(JSON.stringify(result.finalOutput ?? null)) as JsonValue);
        }
        stop++;
        // Kept before the suspension is published: a pass retried after a
        // crash answers the same stop from the same state.
        await states.put(keyOf(stop), result.state.toString());
        state = result.state;
      }
      if (!state) throw new Error("no run state to resume");
      const current = state;
      const waiting: string[] = [];
      const answers: (() => void)[] = [];
      for (const item of current.getInterruptions()) {
        toolCall(callId(item), () => {
          try {
            const req = toRequest(item);
            // A gated call's request is made on the replay too: interrupt
            // checks the approved digest (CallMismatch fails the run).
            const d = interrupt(req.call || !isResuming() ? req : {});
            if (req.call && d.arguments !== undefined) {
              // The SDK runs the call as asked; the approvers approved another.
              answers.push(() => current.reject(item, { message: "approved with edited arguments, which cannot run here" }));
              return d;
            }
            answers.push(() => current.approve(item));
            return d;
          } catch (e) {
            if (e instanceof Cancelled) {
              const message = rejection(e.decision, e.reason);
              answers.push(() => current.reject(item, { message }));
            } else if (e instanceof Suspended) {
              waiting.push(...e.interruptIds);
            } else {
              throw e;
            }
            return undefined;
          }
        });
      }
      // Every approval of the turn goes in one suspension.
      if (waiting.length > 0) throw new Suspended(waiting);
      for (const answer of answers) answer();
      result = await run(options.agent, current, { signal });
      state = undefined;
    }
  };
}
