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
 *
 * Permissions do not keep another user's JetStream API answers out of
 * those keys: nats-server sends an answer to whatever reply subject a
 * request names, with its own rights, and a stream stores it there
 * (docs/security.md). So every state is written with a message id, a read
 * takes only a client's publish, and the SHA-256 digest of each stop's
 * state is a step of the run's journal (`openai-agents:state:<stop>`),
 * which the coordinator stores with the pass's outcome: a replay resumes
 * only from the states its run stored, and fails when one was replaced.
 */

import { createHash, randomBytes } from "node:crypto";

import { headers, type NatsConnection } from "@nats-io/nats-core";
import { jetstream } from "@nats-io/jetstream";
import { run, RunState, type AgentInputItem, type RunResult, type RunToolApprovalItem } from "@openai/agents-core";

import {
  Cancelled,
  interrupt,
  isResuming,
  lastStored,
  onRunFinished,
  ProtocolError,
  restartSteps,
  step,
  Suspended,
  toolCall,
  type AgentBody,
  type Decision,
  type JsonValue,
  type Request,
  type StoredMessage,
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
   * The adapter never creates it: it writes with JetStream publishes to a
   * key's subject and reads with direct gets naming the key, the calls
   * per-agent permissions allow.
   */
  bucket?: string;
  /** The inbox prefix of direct-get replies (default: the connection's own, else `_INBOX`). */
  inboxPrefix?: string;
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

/** How long a read or write of a state waits for the server. */
const TIMEOUT_MS = 5000;

/** The journal step binding stop n's state: its SHA-256 digest. */
const stateStep = (n: number): string => `openai-agents:state:${n}`;

/** A state's SHA-256 digest, hex, of its bytes as stored. */
const digestOf = (data: Uint8Array): string => createHash("sha256").update(data).digest("hex");

/** Thrown by a stop's step for what holds no state of a client's publish: nothing is journaled. */
class NotAState extends Error {}

/** Whether a stored message is a state a client put: its publish, and no delete marker. */
function isState(m: StoredMessage): boolean {
  const op = m.headers?.get("KV-Operation") ?? "";
  return m.published && op !== "DEL" && op !== "PURGE";
}

/** The error for a stop whose state is not the one its run stored: the pass fails, nothing is resumed. */
function replaced(run: string, n: number, key: string): ProtocolError {
  return new ProtocolError(
    "not_allowed",
    `openai-agents: the state kept for stop ${n} of run ${run} (key ${key}) was replaced: it is not the one this run ` +
      `stored, whose digest its journal holds (an answer the server stored under the key for another user, or a deletion); ` +
      `nothing is resumed from it`,
  );
}

/**
 * The run's last state, scanning its stops 0, 1, ... with one step per
 * stop: a stop journaled by an earlier pass must hold the state with that
 * digest (else it was replaced, and the pass fails); one not journaled is
 * taken, and journaled now, when it is a client's publish (a pass retried
 * after a crash stored it). The scan ends at an absent key, or at one
 * holding anything else (an answer planted beyond the run's last stop).
 */
async function lastState(
  read: (n: number) => Promise<StoredMessage | undefined>,
  refuse: (n: number) => Error,
): Promise<{ stop: number; state: string | undefined }> {
  let state: string | undefined;
  for (let n = 0; ; n++) {
    const m = await read(n);
    if (!m) return { stop: n - 1, state };
    const digest = digestOf(m.data);
    let journaled: string;
    try {
      journaled = await step(stateStep(n), () => {
        if (!isState(m)) throw new NotAState();
        return digest;
      });
    } catch (e) {
      if (!(e instanceof NotAState)) throw e;
      // The failed step counted as a call of its name. Steps count from 0
      // again (this scan is the only user of steps so far in the pass), so
      // a state this pass keeps at stop n is journaled under the key every
      // later pass's scan reads.
      restartSteps();
      return { stop: n - 1, state };
    }
    if (journaled !== digest) throw refuse(n);
    state = new TextDecoder().decode(m.data);
  }
}

/**
 * An Interlock agent body running `agent` with the OpenAI Agents SDK.
 * Interrupt ids are `interruptId(run, callId, 0)`: the tool call's id is
 * the tool-call scope (call ids must be unique within a run, as the model's
 * are). Register it as the agent's body: its journal steps
 * (`openai-agents:state:<stop>`) come first in each pass.
 */
export function openAIAgentsBody<TAgent extends AnyAgent>(options: OpenAIAgentsOptions<TAgent>): AgentBody {
  const bucket = options.bucket ?? "interlock_openai_agents";
  const toRequest = options.toRequest ?? defaultRequest;
  const rejection = options.rejection ?? ((d, reason) => d.comment || reason);
  const toInput =
    options.input ??
    ((v: JsonValue | undefined): string => (typeof v === "string" ? v : JSON.stringify(v ?? null)));
  // The connection's own prefix unless told otherwise: a user made by
  // `interlock auth` may subscribe under its own prefix alone.
  const inbox = options.inboxPrefix ?? (options.nc as { options?: { inboxPrefix?: string } }).options?.inboxPrefix ?? "_INBOX";
  const js = jetstream(options.nc);
  const subjectOf = (key: string): string => `$KV.${bucket}.${key}`;
  const missing = (e: unknown): Error =>
    new Error(
      `openai-agents: the run states bucket ${bucket} cannot be read or written (created by \`interlock provision\`; ` +
        `the agent's user needs $KV.${bucket}.<agent>.> and its direct gets): ${(e as Error).message}`,
      { cause: e },
    );
  /** What the bucket holds under `key`, with its headers as stored. */
  const read = (key: string): Promise<StoredMessage | undefined> =>
    lastStored(options.nc, inbox, `KV_${bucket}`, subjectOf(key), TIMEOUT_MS).catch((e: unknown) => {
      throw missing(e);
    });
  /**
   * Puts `data` under `key` (a delete marker when `del`) with a fresh
   * message id, so it reads as a client's publish, never as an answer.
   */
  const write = async (key: string, data: Uint8Array, del = false): Promise<void> => {
    const h = headers();
    if (del) h.set("KV-Operation", "DEL");
    const msgID = randomBytes(12).toString("base64url");
    await js.publish(subjectOf(key), data, { msgID, headers: h, timeout: TIMEOUT_MS }).catch((e: unknown) => {
      throw missing(e);
    });
  };

  return async (input, { signal, run: info }) => {
    // Stop n is kept under <agent>.<run>.<n>, under the agent's own key prefix.
    const keyOf = (n: number): string => `${info.agent}.${info.runId}.${n}`;
    const refuse = (n: number): Error => replaced(info.runId, n, keyOf(n));
    const last = await lastState((n) => read(keyOf(n)), refuse);
    let stop = last.stop;
    const stored = last.state;
    // Once the run's end is stored (not before: a retried pass would need
    // them), its states go.
    onRunFinished(async () => {
      for (let n = 0; n <= stop; n++) await write(keyOf(n), new Uint8Array(0), true);
    });
    /** Keeps stop n's state: its digest journaled first (one journaled before must match), then the state. */
    const keep = async (n: number, state: string): Promise<void> => {
      const data = new TextEncoder().encode(state);
      const digest = digestOf(data);
      if ((await step(stateStep(n), () => digest)) !== digest) throw refuse(n);
      await write(keyOf(n), data);
    };
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
        await keep(stop, result.state.toString());
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
