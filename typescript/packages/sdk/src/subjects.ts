/** Subject names and token validation, as in the Go `subjects` package. */

import { InvalidToken } from "./errors.js";
import { isObject, text, type JsonObject } from "./json.js";

/** The default subject prefix. */
export const DEFAULT_PREFIX = "interlock";
/** The longest token, in bytes. */
export const MAX_TOKEN_LEN = 128;
/** The run token of events about input that names no valid run. */
export const NO_RUN = "_";

const TOKEN = /^[A-Za-z0-9_-]{1,128}$/;

/** Throw {@link InvalidToken} unless `value` is 1 to 128 bytes of ASCII letters, digits, `-` and `_`. */
export function validateToken(kind: string, value: string): void {
  if (typeof value !== "string" || value === "") throw new InvalidToken(`${kind} is empty`);
  const size = Buffer.byteLength(value, "utf8");
  if (size > MAX_TOKEN_LEN) throw new InvalidToken(`${kind} is ${size} bytes, longer than ${MAX_TOKEN_LEN}`);
  if (!TOKEN.test(value)) {
    let bad = "";
    for (const c of value) {
      if (!TOKEN.test(c)) {
        bad = c;
        break;
      }
    }
    throw new InvalidToken(`${kind} ${JSON.stringify(value)} has ${JSON.stringify(bad)}; use letters, digits, '-' and '_'`);
  }
}

function isToken(v: unknown): boolean {
  return typeof v === "string" && TOKEN.test(v) && Buffer.byteLength(v, "utf8") <= MAX_TOKEN_LEN;
}

/** Event types other roles report as observations, with the one role whose NATS permissions let it publish each. */
export const OBSERVATION_TYPES: Readonly<Record<string, string>> = Object.freeze({
  notification_failed: "notifier",
  access_refused: "gateway",
});

/** Event types that carry a verdict. */
export const DECISION_EVENT_TYPES: ReadonlySet<string> = new Set([
  "decision_accepted",
  "decision_rejected",
  "decision_duplicate",
  "vote_recorded",
]);

/** An audit entry as a reader takes it: type and run from its subject. */
export interface StoredEvent extends JsonObject {
  /** The event type: the subject's last token. */
  type: string;
}

/** The subjects under one prefix (one or more tokens joined by `.`). */
export class Namespace {
  readonly prefix: string;

  constructor(prefix: string = DEFAULT_PREFIX) {
    for (const part of prefix.split(".")) validateToken("prefix token", part);
    this.prefix = prefix;
  }

  private join(...tokens: string[]): string {
    return [this.prefix, ...tokens].join(".");
  }

  /** Server-side name of stream `name` (WORK, RUNS, DECISIONS, EVENTS, DLQ, AGUI, ...). */
  stream(name: string): string {
    return this.prefix.replaceAll(".", "_").toUpperCase() + "_" + name;
  }

  /** Server-side name of KV bucket `name` (runs, pending, ...). */
  bucket(name: string): string {
    return this.prefix.replaceAll(".", "_") + "_" + name;
  }

  /** Where the coordinator publishes an agent's replays. */
  work(agent: string): string {
    validateToken("agent", agent);
    return this.join("work", agent);
  }

  /** Where whoever starts a run publishes its first pass. */
  start(agent: string): string {
    validateToken("agent", agent);
    return this.join("start", agent);
  }

  /**
   * Where `requester` starts a run of `agent` (protocol version 2):
   * `<prefix>.start.<agent>.<requester>`. NATS permissions bind the last
   * token to the user who may publish it, and the worker reports it as the
   * run's requester, whom a decision policy can exclude from approving.
   */
  startAs(agent: string, requester: string): string {
    validateToken("agent", agent);
    validateToken("requester", requester);
    return this.join("start", agent, requester);
  }

  /**
   * The requester a first pass of `agent` received on `subject` names: `""`
   * on `start.<agent>`, the last token on `start.<agent>.<requester>`,
   * undefined on any other subject. A start subject whose requester token
   * the protocol refuses (the worker's filter matches any token there)
   * throws InvalidToken: the item is malformed, not a replay.
   */
  requesterOf(agent: string, subject: string): string | undefined {
    const start = this.start(agent);
    if (subject === start) return "";
    if (!subject.startsWith(start + ".")) return undefined;
    const token = subject.slice(start.length + 1);
    validateToken("requester", token);
    return token;
  }

  /**
   * The subjects of `agent`'s work, replays, then first passes, then first
   * passes started by a requester: the filter of the durable consumer its
   * workers share.
   */
  agentWork(agent: string): string[] {
    return [this.work(agent), this.start(agent), this.start(agent) + ".*"];
  }

  /**
   * The wildcards matching every agent's waiting work, first passes then
   * replays (what a backlog check counts); the token after the kind is the
   * agent (a first pass's subject may end in its requester).
   */
  backlog(): string[] {
    return [this.join("start", ">"), this.join("work", ">")];
  }

  private agentRun(kind: string, agent: string, run: string): string {
    validateToken("agent", agent);
    validateToken("run id", run);
    return this.join(kind, agent, run);
  }

  /** Where a worker publishes a pass's suspension. */
  suspended(agent: string, run: string): string {
    return this.agentRun("suspended", agent, run);
  }

  /** Where a worker publishes a pass's completion. */
  /** The subject a worker asks on, before suspending, whether an operator rule settles an interrupt of `run` (protocol version 2). */
  ask(agent: string, run: string): string {
    return this.agentRun("ask", agent, run);
  }

  completed(agent: string, run: string): string {
    return this.agentRun("completed", agent, run);
  }

  /** Where a worker publishes a pass's failure. */
  failed(agent: string, run: string): string {
    return this.agentRun("failed", agent, run);
  }

  /** The resume subject of `run`; with `approver`, the one that identifies the decider. */
  resume(run: string, approver?: string): string {
    validateToken("run id", run);
    if (!approver) return this.join("resume", run);
    validateToken("approver", approver);
    return this.join("resume", run, approver);
  }

  /** Where the coordinator records event `eventType` of `run` (`_`: no run). */
  events(run: string, eventType: string): string {
    if (run !== NO_RUN) validateToken("run id", run);
    validateToken("event type", eventType);
    return this.join("events", run, eventType);
  }

  /** Every event of `run`. */
  runEvents(run: string): string {
    validateToken("run id", run);
    return this.join("events", run, "*");
  }

  /** Every message of `run` on `agent`'s own subjects of the runs stream. */
  runOutcomes(agent: string, run: string): string {
    validateToken("agent", agent);
    validateToken("run id", run);
    return this.join("*", agent, run);
  }

  /** `<prefix>.agui.<agent>.<run>`: the AG-UI events of the agent's run. */
  agui(agent: string, run: string): string {
    return this.agentRun("agui", agent, run);
  }

  /** Where a consumer copies a message it gave up on. */
  deadLetter(source: string): string {
    validateToken("dead-letter source", source);
    return this.join("dlq", source);
  }

  /**
   * The event stored as `data` under `subject`, or null when the subject is
   * not an events subject or the body is not a JSON object. Its type and run
   * come from the subject, which NATS permissions vouch for, never from the
   * body; a verdict is kept only on decision events, the observer of an
   * observation is the one role that may publish it, and a run record's
   * sealed copy (`record`) is left out.
   */
  storedEvent(subject: string, data: Uint8Array): StoredEvent | null {
    if (!subject.startsWith(this.prefix + ".")) return null;
    const tokens = subject.slice(this.prefix.length + 1).split(".");
    if (tokens.length !== 3 || tokens[0] !== "events") return null;
    let ev: unknown;
    try {
      ev = JSON.parse(text(data));
    } catch {
      return null;
    }
    if (!isObject(ev)) return null;
    const run = tokens[1]!;
    const type = tokens[2]!;
    if (run !== NO_RUN || isToken(ev["runId"])) ev["runId"] = run;
    ev["type"] = type;
    if (!DECISION_EVENT_TYPES.has(type)) delete ev["verdict"];
    delete ev["observer"];
    // A run record's sealed copy (runs bucket in memory): the coordinator's alone.
    delete ev["record"];
    const observer = Object.hasOwn(OBSERVATION_TYPES, type) ? OBSERVATION_TYPES[type] : undefined;
    if (observer !== undefined) ev["observer"] = observer;
    return ev as StoredEvent;
  }
}

/**
 * The durable consumer on the work stream through which `agent`'s workers
 * take its work ({@link Namespace.agentWork}), in every SDK; it also names
 * their dead letters' source.
 */
export function workerDurable(agent: string): string {
  return "worker_" + agent;
}

/** The inbox prefix NATS user `identity` receives verdicts under (`_INBOX.anonymous` for `""`). */
export function inboxPrefix(identity: string): string {
  return "_INBOX." + (identity || "anonymous");
}
