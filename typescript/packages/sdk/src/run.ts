/**
 * The replay model inside an agent body: interrupt, isResuming, tool-call
 * scopes, journaled steps and AG-UI events. The run's state flows through
 * AsyncLocalStorage, so it follows the body into every promise it starts.
 */

import { AsyncLocalStorage } from "node:async_hooks";

import { callDigest } from "./calldigest.js";
import { CallMismatch, Cancelled, InvalidRequest, NotInRun, ProtocolError, Suspended, ToolCallMismatch } from "./errors.js";
import { interruptId, stepKey } from "./ids.js";
import { toJson, type JsonObject, type JsonValue } from "./json.js";
import { Decision, type Request, type RunInfo } from "./types.js";
import { validateInterrupt } from "./wire.js";

/**
 * Publishes the n-th AG-UI event of the run (skipping those the run kept);
 * `suspended` says whether an undecided interrupt came before it in the pass.
 */
export type EmitFn = (n: number, event: JsonValue, suspended: boolean) => Promise<void>;

/** The state of one pass of a run. @internal */
export class PassState {
  readonly info: RunInfo;
  readonly signal: AbortSignal;
  readonly decisions: Map<string, JsonObject>;
  readonly journal: Map<string, JsonValue>;
  readonly ordinals = new Map<string, number>();
  readonly steps = new Map<string, number>();
  readonly pending: JsonObject[] = [];
  readonly requestErrors: Error[] = [];
  emitted = 0;
  readonly emit: EmitFn | undefined;
  readonly finished: (() => void | Promise<void>)[] = [];
  /** By tool call: the execution key of the last approved call `interrupt` returned in it. */
  readonly keys = new Map<string, string>();
  /**
   * Set by a worker with `askRules`: asks the coordinator whether an
   * operator rule settles an interrupt (its wire form) before the pass
   * suspends on it; the rule's decision, or undefined to suspend.
   */
  ask: ((interrupt: JsonObject) => Promise<JsonObject | undefined>) | undefined;

  constructor(
    info: RunInfo,
    decisions: readonly JsonObject[],
    journal: JsonObject,
    signal: AbortSignal,
    emit?: EmitFn,
  ) {
    this.info = info;
    this.signal = signal;
    this.decisions = new Map(decisions.map((d) => [d["interruptId"] as string, d]));
    this.journal = new Map(Object.entries(journal));
    this.emit = emit;
  }
}

interface Scope {
  pass: PassState;
  toolCall: string;
}

const storage = new AsyncLocalStorage<Scope>();

/** Run `fn` as the body of `pass`. @internal */
export function runInPass<T>(pass: PassState, fn: () => T): T {
  return storage.run({ pass, toolCall: "" }, fn);
}

/** The run and pass the caller runs in, or undefined outside a run. */
export function runInfo(): RunInfo | undefined {
  return storage.getStore()?.pass.info;
}

/** The pass's abort signal (aborted on the pass timeout or a worker's stop), or undefined outside a run. */
export function passSignal(): AbortSignal | undefined {
  return storage.getStore()?.pass.signal;
}

/**
 * Scope interrupts and steps to one tool call: two identical gated calls in
 * one turn, each in its own scope, get their own interrupts and decisions.
 * Within a scope, interrupts are matched by the order raised.
 */
export function toolCall<T>(toolCallId: string, fn: () => T): T {
  if (typeof toolCallId !== "string") throw new TypeError("toolCallId must be a string");
  const s = storage.getStore();
  if (!s) return fn();
  return storage.run({ pass: s.pass, toolCall: toolCallId }, fn);
}

/** The tool call in scope (`""` outside any). */
export function currentToolCall(): string {
  return storage.getStore()?.toolCall ?? "";
}

/**
 * Whether the next `interrupt` in this scope returns a decision rather than
 * suspend: the predicate `interrupt` itself uses. False on the first pass,
 * true on a replay once that interrupt is decided, false outside a run.
 */
export function isResuming(): boolean {
  const s = storage.getStore();
  if (!s) return false;
  const ordinal = s.pass.ordinals.get(s.toolCall) ?? 0;
  return decided(s.pass, interruptId(s.pass.info.runId, s.toolCall, ordinal)) !== undefined;
}

/**
 * Ask a person for a decision.
 *
 * On the suspend pass it records `request` and throws {@link Suspended}; let
 * it propagate: the pass ends, and every interrupt raised in it is published
 * in one suspension. On the replay pass, when this interrupt's decision is
 * present, it returns the {@link Decision} **without reading `request`**; a
 * cancelled decision throws {@link Cancelled} instead, never an approval.
 * Outside a run it throws {@link NotInRun}.
 *
 * A request with a `call` (protocol version 2) binds the approval to that
 * call: give the same request on the replay, and `interrupt` checks that the
 * call about to run (the request's, or the approvers' edit of it,
 * {@link approvedArguments}) has the approved digest, throwing
 * {@link CallMismatch} otherwise (run nothing then). The approved call's
 * execution key is then {@link executionKey} in this tool-call scope.
 */
export function interrupt(request: Request = {}): Decision {
  const { p, scope, id, found } = lookup();
  if (found) return answer(p, scope, found, request);
  p.pending.push(wireOf(p, id, scope, request));
  throw new Suspended([id]);
}

/**
 * {@link interrupt}, awaited, for a pass that may be settled in one round
 * trip (protocol version 2).
 *
 * In a worker made with `askRules: true` it asks the coordinator, before
 * suspending, whether an operator rule settles the interrupt (`interlock
 * serve --policies`): a rule's approval is returned (and a rule's denial
 * throws {@link Cancelled}) in the same pass, with no suspension and no
 * replay. The decision is journaled under `ask/<interrupt id>`, so every
 * later pass of the run returns it without asking again. Without a rule
 * that settles it, or without an answer within the worker's `askTimeoutMs`,
 * it suspends exactly as {@link interrupt} does (it fails closed: it never
 * approves on its own). Elsewhere it is {@link interrupt}.
 */
export async function interruptAsync(request: Request = {}): Promise<Decision> {
  const { p, scope, id, found } = lookup();
  if (found) return answer(p, scope, found, request);
  const wire = wireOf(p, id, scope, request);
  if (p.ask) {
    const decided = await p.ask(wire);
    if (decided) {
      // Journaled with the pass's outcome: every later pass returns this
      // decision without asking again.
      p.journal.set(askKey(id), structuredClone(decided));
      return answer(p, scope, decided, request);
    }
  }
  p.pending.push(wire);
  throw new Suspended([id]);
}

/** The journal key of the decision an operator rule made on `interruptId` when asked ({@link interruptAsync}). */
export function askKey(interruptId: string): string {
  return "ask/" + interruptId;
}

function lookup(): { p: PassState; scope: string; id: string; found: JsonObject | undefined } {
  const s = storage.getStore();
  if (!s) throw new NotInRun("interrupt: not inside an Interlock run");
  const p = s.pass;
  const ordinal = p.ordinals.get(s.toolCall) ?? 0;
  p.ordinals.set(s.toolCall, ordinal + 1);
  const id = interruptId(p.info.runId, s.toolCall, ordinal);
  return { p, scope: s.toolCall, id, found: decided(p, id) };
}

/**
 * The decision interrupt `id` of pass `p` has: the one the replay carries,
 * or one an operator rule made when asked (journaled). What `interrupt`
 * returns and `isResuming` predicts.
 */
function decided(p: PassState, id: string): JsonObject | undefined {
  const found = p.decisions.get(id);
  if (found) return found;
  const asked = p.journal.get(askKey(id));
  if (asked !== null && typeof asked === "object" && !Array.isArray(asked) && asked["interruptId"] === id) return asked;
  return undefined;
}

function answer(p: PassState, scope: string, found: JsonObject, request: Request): Decision {
  const d = new Decision(found);
  if (d.cancelled) throw new Cancelled(d);
  if (request.call) checkCall(d, request.call.tool, approvedArguments(d, request.call.arguments));
  if (d.executionKey) p.keys.set(scope, d.executionKey);
  return d;
}

function wireOf(p: PassState, id: string, scope: string, request: Request): JsonObject {
  try {
    return toWire(id, scope, request);
  } catch (e) {
    const err = e instanceof Error ? e : new InvalidRequest(String(e));
    p.requestErrors.push(err);
    throw err;
  }
}

/**
 * Throw {@link CallMismatch} unless `decision` approved calling `tool` with
 * `args` (its call digest is theirs). A decision that approved no call (no
 * `callDigest`), or was not an approval, approves none: a tool that requires
 * an approved call fails closed. Arguments with no digest throw
 * {@link InvalidRequest}. A check inside the agent stops mistakes, not a
 * hostile agent: only an executor outside it enforces an approval.
 */
export function checkCall(decision: Decision, tool: string, args?: unknown): void {
  let got: string;
  try {
    got = callDigest(tool, args);
  } catch (e) {
    if (e instanceof ProtocolError) throw new InvalidRequest(`call ${JSON.stringify(tool)}: ${e.detail}`);
    throw e;
  }
  if (decision.status !== "resolved" || decision.callDigest !== got) {
    throw new CallMismatch(decision.interruptId, decision.callDigest, got);
  }
}

/** The arguments the approvers approved: their edited `arguments` when they edited them, `requested` otherwise. */
export function approvedArguments<T>(decision: Decision, requested: T): T | JsonValue {
  return decision.arguments !== undefined ? decision.arguments : requested;
}

/**
 * The execution key of the last approved call {@link interrupt} returned in
 * this tool-call scope (or in `toolCallId`'s), `""` outside a run or before
 * one (protocol version 2). It is the same on every replay of the run and
 * nobody without the coordinator's key can compute it: pass it to the
 * outside system as the idempotency key of the call's side effect, so a
 * crash after the side effect and before the pass's outcome does not do it
 * twice. {@link Decision.executionKey} is the same key.
 */
export function executionKey(toolCallId?: string): string {
  const s = storage.getStore();
  if (!s) return "";
  return s.pass.keys.get(toolCallId ?? s.toolCall) ?? "";
}

/** The wire interrupt `id` for `req` in tool call `scope`. @internal */
export function toWire(id: string, scope: string, req: Request): JsonObject {
  if (req.toolCallId && req.toolCallId !== scope) {
    throw new ToolCallMismatch(
      `interrupt ${id}: request names tool call ${JSON.stringify(req.toolCallId)}, scope has ${JSON.stringify(scope)} (use toolCall())`,
    );
  }
  const out: Record<string, unknown> = { id, reason: req.reason || (scope ? "tool_call" : "confirmation") };
  if (req.message) out["message"] = req.message;
  if (scope) out["toolCallId"] = scope;
  if (req.responseSchema !== undefined) out["responseSchema"] = req.responseSchema;
  if (req.expiresAt !== undefined) {
    out["expiresAt"] = rfc3339(req.expiresAt, id);
  } else if (req.timeoutMs !== undefined) {
    out["expiresAt"] = rfc3339(new Date(Date.now() + req.timeoutMs), id);
  }
  if (req.metadata && Object.keys(req.metadata).length > 0) out["metadata"] = req.metadata;
  if (req.approvers?.length) out["approvers"] = [...req.approvers];
  if (req.approverGroups?.length) out["approverGroups"] = [...req.approverGroups];
  if (req.onExpiry) out["onExpiry"] = req.onExpiry;
  if (req.remindBeforeSeconds?.length) out["remindBeforeSeconds"] = [...req.remindBeforeSeconds];
  if (req.oneClickLinks !== undefined) out["oneClickLinks"] = req.oneClickLinks;
  if (req.chatDecisions !== undefined) out["chatDecisions"] = req.chatDecisions;
  if (req.sensitive !== undefined) out["sensitive"] = req.sensitive;
  if (req.call) {
    let digest: string;
    try {
      digest = callDigest(req.call.tool, req.call.arguments);
    } catch (e) {
      if (e instanceof ProtocolError) throw new InvalidRequest(`interrupt ${id}: call: ${e.detail}`);
      throw e;
    }
    const c: Record<string, unknown> = { tool: req.call.tool };
    if (req.call.arguments !== undefined) c["arguments"] = req.call.arguments;
    c["digest"] = digest;
    out["call"] = c;
  }
  if (req.policy) {
    const pol: Record<string, unknown> = {};
    const { approvals, denials, allowRequester, allowChange } = req.policy;
    if (approvals !== undefined && approvals !== 1) pol["approvals"] = approvals;
    if (denials !== undefined && denials !== 1) pol["denials"] = denials;
    if (allowRequester) pol["allowRequester"] = true;
    if (allowChange) pol["allowChange"] = true;
    if (Object.keys(pol).length === 0) pol["approvals"] = 1; // still a policy: decided by votes
    out["policy"] = pol;
  }
  try {
    const json = toJson(out, `interrupt ${id}`);
    return validateInterrupt(json);
  } catch (e) {
    const detail = e instanceof ProtocolError ? e.detail : e instanceof Error ? e.message : String(e);
    throw new InvalidRequest(`interrupt ${id}: ${detail}`);
  }
}

function rfc3339(t: Date, id: string): string {
  if (!(t instanceof Date) || Number.isNaN(t.getTime())) throw new InvalidRequest(`interrupt ${id}: expiresAt is not a valid Date`);
  return t.toISOString();
}

/**
 * Run `fn` once per run: the first pass records its result (which must be
 * JSON) in the journal, and every replay returns the recorded result without
 * calling `fn`. Steps are keyed by tool call, name and how many times the
 * name was used before in that tool call. A failed `fn` is not recorded. The
 * journal is stored with the pass's outcome, so a step whose pass crashed
 * before it ended runs again on the retry. Outside a run it throws
 * {@link NotInRun}.
 */
export async function step<T extends JsonValue>(name: string, fn: () => T | Promise<T>): Promise<T> {
  const s = storage.getStore();
  if (!s) throw new NotInRun(`step ${JSON.stringify(name)}: not inside an Interlock run`);
  const p = s.pass;
  const counter = s.toolCall + "\0" + name;
  const n = p.steps.get(counter) ?? 0;
  p.steps.set(counter, n + 1);
  const key = stepKey(s.toolCall, name, n);
  if (p.journal.has(key)) return structuredClone(p.journal.get(key)) as T;
  const result = await fn();
  let value: JsonValue;
  try {
    value = toJson(result, `step ${JSON.stringify(name)}`);
  } catch (e) {
    throw new TypeError(`step ${JSON.stringify(name)}: result cannot be journaled: ${(e as Error).message}`, { cause: e });
  }
  p.journal.set(key, structuredClone(value));
  return value as T; // the first pass sees what every replay will
}

/**
 * Count step calls from 0 again in this pass, so code the framework runs
 * again within one pass finds its journaled results (LangGraph runs a node
 * again from its top when it resumes it). For adapters; interrupts keep
 * their count. Outside a run it throws {@link NotInRun}.
 */
export function restartSteps(): void {
  const s = storage.getStore();
  if (!s) throw new NotInRun("restartSteps: not inside an Interlock run");
  s.pass.steps.clear();
}

/**
 * Send an AG-UI event (an object with `type`) to the clients following the
 * run through the AG-UI bridge, and keep it in the run's AG-UI stream. A
 * replay sends nothing twice, whatever the body emits between interrupts:
 * the calls an earlier pass made before its first undecided interrupt are
 * skipped by count, and a later call is skipped when an event with the same
 * body is kept and not yet met (the replay may emit those later, after
 * acting on that interrupt). So a body emits the same events in the same
 * order up to where its last pass got, as Go's and Python's `emit` do.
 * Outside a run it throws {@link NotInRun}.
 */
export async function emit(event: JsonObject): Promise<void> {
  const s = storage.getStore();
  if (!s) throw new NotInRun("emit: not inside an Interlock run");
  const n = s.pass.emitted++;
  const value = toJson(event, "emit");
  if (s.pass.emit) await s.pass.emit(n, value, s.pass.pending.length > 0);
}

/**
 * Run `fn` once this pass's outcome, completing or failing the run, is
 * stored (not when the pass suspends or is retried): to clean up what the
 * run kept for its replays, which a retry of the pass would still need. It
 * runs after the work item is acked; a worker that stops or crashes in
 * between never runs it, and an error it throws is logged, so use it only
 * for what may safely stay behind. Outside a run it throws {@link NotInRun}.
 */
export function onRunFinished(fn: () => void | Promise<void>): void {
  const s = storage.getStore();
  if (!s) throw new NotInRun("onRunFinished: not inside an Interlock run");
  s.pass.finished.push(fn);
}

/** Emit one whole assistant text message (start, content, end). */
export async function emitText(messageId: string, text: string): Promise<void> {
  await emit({ type: "TEXT_MESSAGE_START", messageId, role: "assistant" });
  await emit({ type: "TEXT_MESSAGE_CONTENT", messageId, delta: text });
  await emit({ type: "TEXT_MESSAGE_END", messageId });
}

/** Emit a tool call the agent makes: start, arguments, end. */
export async function emitToolCall(toolCallId: string, name: string, args: string): Promise<void> {
  await emit({ type: "TOOL_CALL_START", toolCallId, toolCallName: name });
  await emit({ type: "TOOL_CALL_ARGS", toolCallId, delta: args });
  await emit({ type: "TOOL_CALL_END", toolCallId });
}

/** Emit a tool call's result against its original id. */
export async function emitToolResult(messageId: string, toolCallId: string, content: string): Promise<void> {
  await emit({ type: "TOOL_CALL_RESULT", messageId, toolCallId, content, role: "tool" });
}

/**
 * Run parallel tool calls to the end, so every interrupt they raise goes in
 * the same suspension; then throw {@link Suspended} if any suspended, else
 * the first other error, else return the results in order.
 */
export async function gather<T extends readonly unknown[]>(
  promises: { [K in keyof T]: Promise<T[K]> | T[K] },
): Promise<T> {
  const settled = await Promise.allSettled(promises as readonly unknown[]);
  const ids: string[] = [];
  let first: unknown;
  let failed = false;
  for (const r of settled) {
    if (r.status === "rejected") {
      if (r.reason instanceof Suspended) ids.push(...r.reason.interruptIds);
      else if (!failed) {
        failed = true;
        first = r.reason;
      }
    }
  }
  if (ids.length > 0) throw new Suspended(ids);
  if (failed) throw first;
  return settled.map((r) => (r as PromiseFulfilledResult<unknown>).value) as unknown as T;
}
