/**
 * LangGraph.js on Interlock: `interrupt()` in a graph node becomes a durable
 * Interlock suspension (all the interrupts of one stop, parallel branches
 * included, in one suspension), and the replay resumes the graph with
 * `Command({ resume })` built from the decisions, in the order the graph
 * asked.
 *
 * Each pass runs the graph from its input on a fresh in-memory checkpointer
 * and answers every stop the earlier passes saw from the run's decisions, so
 * nothing of the graph's state has to outlive the pass: the decisions (and
 * the journal of `step`s called in nodes) are the run's durable state, kept
 * by Interlock. Nodes run again on every pass, as any Interlock body does,
 * and LangGraph runs an interrupted node again when it resumes it: wrap
 * side effects in `step`, with names unique across the graph's nodes (step
 * ordinals count from 0 at each resume), and call LangGraph's `interrupt`
 * in nodes, not the SDK's.
 */

import { Command, INTERRUPT, isInterrupted, MemorySaver, type Interrupt } from "@langchain/langgraph";

import {
  Cancelled,
  interrupt,
  isResuming,
  restartSteps,
  Suspended,
  toolCall,
  type AgentBody,
  type CancelReason,
  type Decision,
  type JsonObject,
  type JsonValue,
  type Request,
} from "@interlock/sdk";

/** What a graph node's `interrupt()` returns when the person denied it, or its deadline passed: never an approval. */
export interface CancelledAnswer {
  __interlock__: "cancelled";
  /** `denied` or `expired`, from who cancelled, never from metadata. */
  reason: CancelReason;
  /** The approver's comment. */
  comment: string;
  /** Who cancelled (`interlock:expiry` for an expiry). */
  approver: string;
}

/** Whether a value `interrupt()` returned is a cancellation. */
export function isCancelled(answer: unknown): answer is CancelledAnswer {
  return (
    typeof answer === "object" &&
    answer !== null &&
    (answer as { __interlock__?: unknown }).__interlock__ === "cancelled"
  );
}

/** The part of a compiled LangGraph graph the adapter uses. */
export interface Invokable {
  invoke(input: unknown, config: GraphConfig): Promise<unknown>;
  getState(config: GraphConfig): Promise<{ tasks: readonly GraphTask[] }>;
}

/** The config the adapter runs a graph with. */
export interface GraphConfig {
  configurable: { thread_id: string };
  signal?: AbortSignal;
}

/** The part of a state snapshot's task the adapter reads. */
export interface GraphTask {
  name: string;
  path?: readonly unknown[];
  interrupts: readonly Interrupt[];
}

/**
 * The interrupts of a stop in an order that is the same on every pass:
 * LangGraph's interrupt ids and the order of `__interrupt__` change from
 * one run of the graph to the next (they hold a checkpoint's random id, and
 * parallel branches finish in any order), so they are taken task by task,
 * tasks ordered by their path and name, each task's in the order it asked.
 */
async function askedInOrder(compiled: Invokable, config: GraphConfig): Promise<Interrupt[]> {
  const snap = await compiled.getState(config);
  const key = (t: GraphTask): string => JSON.stringify([t.path ?? [], t.name]);
  return [...snap.tasks]
    .sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0))
    .flatMap((t) => [...t.interrupts]);
}

/** A graph builder (such as a `StateGraph`), compiled afresh for every pass with an in-memory checkpointer. */
export interface Compilable {
  compile(options: { checkpointer: MemorySaver }): Invokable;
}

/** Options of {@link langGraphAgent}. */
export interface LangGraphAgentOptions {
  /** The graph's input from the run's input (default: the run's input as it is). */
  input?: (input: JsonValue | undefined) => unknown;
  /** The Interlock request for one LangGraph interrupt (default: {@link defaultRequest}). Called on the suspend pass only. */
  toRequest?: (asked: Interrupt, index: number) => Request;
  /** The resume value for a resolved decision (default: its payload, falsy ones included; `true` when it has none). */
  toResume?: (decision: Decision) => unknown;
  /** The run's result from the graph's final state (default: the state, as JSON). */
  output?: (state: unknown) => unknown;
  /** The tool-call scope the graph's interrupts are raised in (default `""`: none). */
  scope?: string;
  /** The most stops one pass may answer before it fails (default 1000): a guard against a graph that asks forever. */
  maxStops?: number;
}

function textOf(value: unknown): string {
  if (typeof value === "string") return value;
  if (typeof value === "object" && value !== null) {
    for (const k of ["message", "question", "prompt"]) {
      const v = (value as Record<string, unknown>)[k];
      if (typeof v === "string") return v;
    }
  }
  try {
    return JSON.stringify(value).slice(0, 2000);
  } catch {
    return String(value);
  }
}

function jsonOf(value: unknown): JsonValue {
  try {
    return JSON.parse(JSON.stringify(value ?? null)) as JsonValue;
  } catch {
    return String(value);
  }
}

/**
 * The default request for a LangGraph interrupt: the value's text (the value
 * itself when a string, else its `message`, `question` or `prompt`, else its
 * JSON) as the message, reason `confirmation`, the interrupt's
 * `response_schema` as the response schema, and the value and LangGraph's
 * interrupt id under `metadata.langgraph`.
 */
export function defaultRequest(asked: Interrupt): Request {
  const req: Request = {
    message: textOf(asked.value),
    reason: "confirmation",
    metadata: { langgraph: { interruptId: asked.id ?? "", value: jsonOf(asked.value) } },
  };
  const schema = asked.response_schema as unknown;
  if (typeof schema === "object" && schema !== null && !Array.isArray(schema)) req.responseSchema = schema as JsonObject;
  return req;
}

function defaultResume(d: Decision): unknown {
  return d.hasPayload ? d.payload : true;
}

/**
 * An Interlock agent body that runs a LangGraph graph. `graph` is a builder
 * (compiled afresh each pass with a `MemorySaver`) or a function that makes
 * the compiled graph from the checkpointer it is given.
 */
export function langGraphAgent(
  graph: Compilable | ((checkpointer: MemorySaver) => Invokable),
  options: LangGraphAgentOptions = {},
): AgentBody {
  const make = typeof graph === "function" ? graph : (cp: MemorySaver) => graph.compile({ checkpointer: cp });
  const toRequest = options.toRequest ?? defaultRequest;
  const toResume = options.toResume ?? defaultResume;
  const scope = options.scope ?? "";
  const maxStops = options.maxStops ?? 1000;
  return async (input, { signal, run }) => {
    const compiled = make(new MemorySaver());
    const config: GraphConfig = { configurable: { thread_id: run.runId }, signal };
    let state = await compiled.invoke(options.input ? options.input(input) : input, config);
    for (let stop = 0; isInterrupted(state); stop++) {
      if (stop >= maxStops) throw new Error(`the graph stopped on interrupts more than ${maxStops} times in one pass`);
      const asked = await askedInOrder(compiled, config);
      if (asked.length === 0) throw new Error(`the graph stopped on ${state[INTERRUPT].length} interrupts its tasks do not show`);
      const resume: Record<string, unknown> = {};
      const waiting: string[] = [];
      toolCall(scope, () => {
        asked.forEach((it, i) => {
          try {
            // The request is made on the suspend pass, and on the replay
            // only when it gates a call (protocol version 2): interrupt then
            // checks the decision approved that call (CallMismatch fails
            // the run).
            const replaying = isResuming();
            const req = replaying ? gatedOnly(toRequest(it, i)) : toRequest(it, i);
            const d = interrupt(req);
            resume[it.id ?? ""] = toResume(d);
          } catch (e) {
            if (e instanceof Cancelled) {
              const answer: CancelledAnswer = {
                __interlock__: "cancelled",
                reason: e.reason,
                comment: e.comment,
                approver: e.approver,
              };
              resume[it.id ?? ""] = answer;
            } else if (e instanceof Suspended) {
              waiting.push(...e.interruptIds);
            } else {
              throw e;
            }
          }
        });
      });
      // Every interrupt of this stop goes in one suspension.
      if (waiting.length > 0) throw new Suspended(waiting);
      // LangGraph runs an interrupted node again from its top: its steps
      // count from 0 again, to find what they journaled.
      restartSteps();
      state = await compiled.invoke(new Command({ resume }), config);
    }
    return options.output ? options.output(state) : jsonOf(state);
  };
}

/** The call of a request, for the replay's check; no other field is read there. */
function gatedOnly(req: Request): Request {
  return req.call ? { call: req.call } : {};
}
