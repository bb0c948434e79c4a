/** The client: start runs, decide interrupts, read and wait for runs. */

import { randomBytes } from "node:crypto";

import {
  headers as natsHeaders,
  NoRespondersError,
  TimeoutError,
  type MsgHdrs,
  type NatsConnection,
  type Subscription,
} from "@nats-io/nats-core";
import { JetStreamApiError, jetstream, type JetStreamClient, type PubAck } from "@nats-io/jetstream";

import * as direct from "./direct.js";
import { ProtocolError, Rejected, RunNotFound, Timeout } from "./errors.js";
import { decisionAttemptMsgId, nonce, replyToken, startMsgId, uuid7 } from "./ids.js";
import { encode, isObject, text, toJson, type JsonObject, type JsonValue } from "./json.js";
import { DEFAULT_PREFIX, inboxPrefix, Namespace, NO_RUN, validateToken, type StoredEvent } from "./subjects.js";
import { childTraceparent } from "./trace.js";
import { Run, verdictFrom, type PendingInterrupt, type Status, type Verdict } from "./types.js";
import { decodeDecision, decodeWork, versioned } from "./wire.js";

/** For {@link Client.wait}: the run completed or failed. */
export const finished = (run: Run): boolean => run.finished;
/** For {@link Client.wait}: the run waits for decisions. */
export const suspended = (run: Run): boolean => run.status === "suspended";

/** Options of a {@link Client}. */
export interface ClientOptions {
  /** The subject prefix (default `interlock`). */
  prefix?: string;
  /**
   * The connection's own inbox prefix, where NATS permissions give each user
   * one (connect with the same `inboxPrefix`). A decision published as an
   * identity whose inbox is not this one takes its verdict from the run's
   * events instead. Default: verdicts arrive in `_INBOX.<approver>`.
   */
  inboxPrefix?: string;
  /** How long `decide` waits for a verdict, `wait` for its condition, and each read (default 30,000 ms). */
  timeoutMs?: number;
}

/** Options of {@link Client.start}. */
export interface StartOptions {
  /** The run id (a token; default a fresh UUIDv7). */
  runId?: string;
  /** The conversation thread. */
  threadId?: string;
  /** A W3C trace context to continue (default a new trace). */
  traceparent?: string;
  /**
   * Start as this identity, on `<prefix>.start.<agent>.<requester>`
   * (protocol version 2): the NATS user must be allowed that subject. The run
   * records it as its requester, whom a decision policy can exclude.
   */
  requester?: string;
}

/** Options of {@link Client.decide}. */
export interface DecideOptions {
  /** The answer: any JSON value but null (`false`, `0`, `""`, `[]` and `{}` are answers); leave it out to send none. */
  payload?: JsonValue;
  /** Passed through to the agent; never read by Interlock. */
  metadata?: JsonObject;
  /** Decide as this identity (on `interlock.resume.<run>.<approver>`); default anonymous. */
  approver?: string;
  /** Recorded, and given to the agent with a cancellation. */
  comment?: string;
  /** The dedup key (default a fresh UUIDv7); send again with the same one to apply it once. */
  decisionId?: string;
  /** The path the decision came by (default `sdk`). */
  via?: string;
  /** How long to wait for the verdict (default the client's). */
  timeoutMs?: number;
  /**
   * The digest of the call this vote approves, as the approver saw it
   * (protocol version 2): a vote for other arguments than the interrupt's is
   * rejected `call_mismatch`.
   */
  callDigest?: string;
  /** Edited arguments (protocol version 2): the vote approves the interrupt's tool with these (their own digest). */
  arguments?: JsonValue;
  /** Take back this approver's open vote (status `withdrawn`), where the policy allows changes; the status is ignored. */
  withdraw?: boolean;
}

/** Options of {@link Client.wait}. */
export interface WaitOptions {
  /** How long to wait (default the client's timeout). */
  timeoutMs?: number;
}

interface Waiter {
  resolve: (v: Verdict) => void;
}

/**
 * Starts runs, decides interrupts and reads run records over NATS. It needs
 * no coordinator or worker in the same process.
 *
 * The coordinator sends a decision's verdict only inside the sender's own
 * inbox, `_INBOX.<approver>` (`_INBOX.anonymous` for an anonymous decision):
 * the client subscribes there, unless `inboxPrefix` says the connection has
 * another one; then the verdict comes from the run's events.
 */
export class Client {
  private readonly nc: NatsConnection;
  private readonly js: JetStreamClient;
  private readonly ns: Namespace;
  private readonly inboxPrefix: string | undefined;
  private readonly timeoutMs: number;
  private readonly replies = new Map<string, { base: string; sub: Subscription }>();
  private readonly waiting = new Map<string, Waiter>();

  constructor(nc: NatsConnection, options: ClientOptions = {}) {
    this.nc = nc;
    this.js = jetstream(nc);
    this.ns = new Namespace(options.prefix ?? DEFAULT_PREFIX);
    this.inboxPrefix = options.inboxPrefix;
    this.timeoutMs = options.timeoutMs ?? 30_000;
  }

  /** The subjects this client uses. */
  get namespace(): Namespace {
    return this.ns;
  }

  /** Release the verdict subscriptions (the connection stays open). */
  close(): void {
    for (const { sub } of this.replies.values()) sub.unsubscribe();
    this.replies.clear();
  }

  /**
   * Queue the first pass of a run of `agent` and return the run id. The
   * start's message id holds a nonce of this call's (no other publisher can
   * have it dropped as a duplicate); two calls for one run id queue two first
   * passes, of which the coordinator records the first outcome.
   */
  async start(agent: string, input?: JsonValue, options: StartOptions = {}): Promise<string> {
    const runId = options.runId || uuid7();
    validateToken("run id", runId);
    const work: JsonObject = { version: 1, runId, agent };
    if (options.threadId) work["threadId"] = options.threadId;
    work["pass"] = 0;
    if (input !== undefined && input !== null) work["input"] = toJson(input, "input");
    const data = encode(work);
    decodeWork(data);
    const h = natsHeaders();
    h.set("traceparent", childTraceparent(options.traceparent));
    await this.publish(options.requester ? this.ns.startAs(agent, options.requester) : this.ns.start(agent), data, startMsgId(runId, nonce()), h);
    return runId;
  }

  /**
   * Publish to a stream, repeating the publish (same message id, so it is
   * stored once) while the stream cannot take it, for at least 10 s (a
   * cluster's leader election takes 4 to 9 s), as the Go client does.
   */
  private async publish(subject: string, data: Uint8Array, msgID: string, h: MsgHdrs): Promise<PubAck> {
    const deadline = Date.now() + 10_000;
    for (let wait = 100; ; wait = Math.min(wait * 2, 2000)) {
      try {
        return await this.js.publish(subject, data, { msgID, headers: h, timeout: this.timeoutMs });
      } catch (e) {
        if (!retryable(e) || this.nc.isClosed() || Date.now() + wait > deadline) throw e;
        await sleep(wait);
      }
    }
  }

  private reply(decisionId: string, approver: string): { inbox?: string; verdict: Promise<Verdict> } {
    const allowed = inboxPrefix(approver);
    let resolve!: (v: Verdict) => void;
    const verdict = new Promise<Verdict>((r) => (resolve = r));
    if (this.inboxPrefix && this.inboxPrefix !== allowed) return { verdict };
    let r = this.replies.get(allowed);
    if (!r) {
      const base = `${allowed}.${randomBytes(11).toString("hex")}`;
      const sub = this.nc.subscribe(base + ".*", {
        callback: (err, m) => {
          if (err) return;
          try {
            const raw: unknown = JSON.parse(text(m.data));
            if (!isObject(raw)) return;
            const w = this.waiting.get(m.subject.slice(m.subject.lastIndexOf(".") + 1));
            w?.resolve(verdictFrom(raw));
          } catch {
            // not a verdict
          }
        },
      });
      r = { base, sub };
      this.replies.set(allowed, r);
    }
    this.waiting.set(replyToken(decisionId), { resolve });
    return { inbox: `${r.base}.${replyToken(decisionId)}`, verdict };
  }

  /**
   * Publish a decision on the run's resume subject (the one for `approver`,
   * or the anonymous one) and return the coordinator's verdict. A rejected
   * decision throws {@link Rejected} carrying the verdict; no verdict within
   * the timeout throws {@link Timeout}.
   *
   * On an interrupt with a policy (protocol version 2) a decision is a vote:
   * a vote that counts while the interrupt still waits returns the verdict
   * with outcome `vote_recorded` and its `tally` (approvals so far and
   * needed, who is still waited on); the vote that meets the quorum is
   * `accepted`.
   */
  async decide(runId: string, interruptId: string, status: Status, options: DecideOptions = {}): Promise<Verdict> {
    const d: JsonObject = { version: 1, decisionId: options.decisionId || uuid7(), interruptId, status };
    if (options.payload !== undefined) {
      if (options.payload === null) throw new TypeError("payload null is not allowed: leave it out to send no payload");
      d["payload"] = toJson(options.payload, "payload");
    }
    if (options.metadata !== undefined) d["metadata"] = toJson(options.metadata, "metadata");
    const approver = options.approver ?? "";
    if (approver) d["approver"] = approver;
    if (options.comment) d["comment"] = options.comment;
    if (options.withdraw) d["status"] = "withdrawn";
    if (options.callDigest) d["callDigest"] = options.callDigest;
    if (options.arguments !== undefined) {
      if (options.arguments === null) throw new TypeError("arguments null is not allowed: leave them out to keep the call's");
      d["arguments"] = toJson(options.arguments, "arguments");
    }
    versioned("decision", d);
    const subject = this.ns.resume(runId, approver);
    const data = encode(d);
    decodeDecision(data);
    const decisionId = d["decisionId"] as string;
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    const deadline = Date.now() + timeoutMs;
    const { inbox, verdict } = this.reply(decisionId, approver);
    await this.nc.flush(); // the verdict subscription is in place before the decision
    const h = natsHeaders();
    h.set("Interlock-Via", options.via ?? "sdk");
    if (inbox) h.set("Interlock-Reply-To", inbox);
    let v: Verdict;
    try {
      let rejected = 0;
      let ack: PubAck;
      for (;;) {
        ack = await this.publish(subject, data, decisionAttemptMsgId(approver, decisionId, rejected, data), h);
        if (!ack.duplicate) break;
        // The stream already holds this attempt (this very body), so the
        // coordinator will not see this copy: answer with what became of
        // the one it holds, which the ack names. If it was rejected, this
        // is a new attempt, which no rejection may swallow.
        const earlier = await withDeadline(
          this.verdictOf(runId, ack.seq, deadline),
          deadline,
          `decision ${decisionId}: the stream holds it; no verdict in the events within ${timeoutMs} ms`,
        );
        if (earlier.outcome !== "rejected") {
          return verdictFrom({
            ...earlier.raw,
            outcome: "duplicate",
            replay: false,
            detail: "this decision was already accepted; nothing changed",
          });
        }
        rejected++;
      }
      const waiting = inbox ? verdict : this.verdictOf(runId, ack.seq, deadline);
      v = await withDeadline(
        waiting,
        deadline,
        `decision ${decisionId} is stored; no verdict within ${timeoutMs} ms (is a coordinator running?)`,
      );
    } finally {
      this.waiting.delete(replyToken(decisionId));
    }
    if (v.outcome === "rejected") throw new Rejected(v);
    return v;
  }

  /** {@link decide} with status `resolved`. */
  approve(runId: string, interruptId: string, options: DecideOptions = {}): Promise<Verdict> {
    return this.decide(runId, interruptId, "resolved", options);
  }

  /** {@link decide} taking back the approver's open vote (status `withdrawn`, protocol version 2), where the policy allows changes. */
  withdraw(runId: string, interruptId: string, options: Omit<DecideOptions, "payload" | "withdraw"> = {}): Promise<Verdict> {
    return this.decide(runId, interruptId, "resolved", { ...options, withdraw: true });
  }

  /** {@link decide} with status `cancelled`: the agent gets a distinct cancelled value, never an approval. */
  deny(runId: string, interruptId: string, options: Omit<DecideOptions, "payload"> = {}): Promise<Verdict> {
    return this.decide(runId, interruptId, "cancelled", options);
  }

  /**
   * The verdict on the decision message the decisions stream holds at
   * `seq`, once the coordinator has recorded it: in the run's events, or
   * under the no-run token `_` for a run that does not exist. The
   * coordinator stores it with a message id naming that sequence
   * (`<run>:seq<seq>:decision_<outcome>`, or `:vote_recorded` for a vote
   * that counts), and only it writes there. Each look reads only what was
   * recorded since the last.
   */
  private async verdictOf(runId: string, seq: number, deadline: number): Promise<Verdict> {
    const marks = [`:seq${seq}:decision_`, `:seq${seq}:vote_recorded`];
    const filters = [this.ns.runEvents(runId), this.ns.events(NO_RUN, "decision_rejected")];
    const cursors = [0, 0];
    while (Date.now() < deadline) {
      for (const [i, filter] of filters.entries()) {
        const msgs = await direct.messages(
          this.nc,
          this.inboxPrefix ?? "_INBOX",
          this.ns.stream("EVENTS"),
          filter,
          cursors[i]! + 1,
          undefined,
          this.timeoutMs,
        );
        for (const m of msgs) {
          cursors[i] = m.seq;
          if (!m.published) continue; // an answer the server stored here for another user
          const id = m.headers?.get("Nats-Msg-Id") ?? "";
          if (!marks.some((mark) => id.includes(mark))) continue;
          const raw = this.ns.storedEvent(m.subject, m.data)?.["verdict"];
          if (isObject(raw)) return verdictFrom(raw);
        }
      }
      await sleep(100);
    }
    throw new Timeout(`decision at sequence ${seq}: no verdict in the run's events in time`);
  }

  /** The run's record; throws {@link RunNotFound} before its first pass ends. */
  async run(runId: string): Promise<Run> {
    validateToken("run id", runId);
    const bucket = this.ns.bucket("runs");
    const e = await direct.last(this.nc, this.inboxPrefix ?? "_INBOX", `KV_${bucket}`, `$KV.${bucket}.${runId}`, this.timeoutMs);
    const op = e?.headers?.get("KV-Operation") ?? "";
    // A delete marker is no record unless it is an answer the server stored
    // (one whose carrier said KV-Operation: DEL), refused below.
    if (!e || ((op === "DEL" || op === "PURGE") && !e.answer) || (e.data.length === 0 && e.published)) {
      throw new RunNotFound(`${runId} (a run has a record once its first pass ends)`);
    }
    if (!e.published) {
      // Every write of a record carries a message id; this is an answer the
      // server stored under the run's key for another user (docs/security.md).
      throw new ProtocolError("not_allowed", `run ${runId}: the run record is not a write of the coordinator's (an answer the server stored there for another user)`);
    }
    const raw: unknown = JSON.parse(text(e.data));
    if (!isObject(raw)) throw new RunNotFound(`${runId}: the record is not a JSON object`);
    return new Run(raw);
  }

  /**
   * The run's record once `until` is true for it (default: finished),
   * re-reading it whenever an event of the run is published (and every
   * second). Throws {@link Timeout} after the timeout.
   */
  async wait(runId: string, until: (run: Run) => boolean = finished, options: WaitOptions = {}): Promise<Run> {
    let wake: (() => void) | undefined;
    const state = { changed: false };
    const changedMeanwhile = (): boolean => state.changed;
    const sub = this.nc.subscribe(this.ns.runEvents(runId), {
      callback: () => {
        state.changed = true;
        wake?.();
      },
    });
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    const deadline = Date.now() + timeoutMs;
    let last: Run | undefined;
    let refused: ProtocolError | undefined;
    try {
      await this.nc.flush();
      for (;;) {
        state.changed = false;
        try {
          last = await this.run(runId);
          refused = undefined;
          if (until(last)) return last;
        } catch (e) {
          // What the coordinator did not write under the key: before a
          // run's first record, which replaces it, waited on as none.
          const foreign = e instanceof ProtocolError && e.code === "not_allowed";
          if (!(e instanceof RunNotFound) && !foreign) throw e;
          if (foreign) refused = e;
        }
        const left = deadline - Date.now();
        if (left <= 0) {
          const why = refused ? `; last read refused: ${refused.message}` : "";
          throw new Timeout(`run ${runId}: condition not met in ${timeoutMs} ms (last seen: ${last?.status ?? "no record"}${why})`);
        }
        if (!changedMeanwhile()) {
          await new Promise<void>((resolve) => {
            const t = setTimeout(resolve, Math.min(1000, left));
            wake = () => {
              clearTimeout(t);
              resolve();
            };
          });
          wake = undefined;
        }
      }
    } finally {
      sub.unsubscribe();
    }
  }

  /**
   * Every interrupt waiting for a decision, oldest first, from the pending
   * index (each as `interlock pending --json` prints it), read page by page:
   * it costs what is pending, not every run.
   */
  async pending(): Promise<PendingInterrupt[]> {
    const latest = new Map<string, PendingInterrupt>();
    let after = 0;
    for (;;) {
      const page = await this.pendingPage(after, 256);
      // An entry put again meanwhile (an escalation) comes once more, later:
      // the last one read is its current state.
      for (const p of page.entries) latest.set(`${p.runId}\0${p.id}`, p);
      if (page.next === 0) break;
      after = page.next;
    }
    return [...latest.values()].sort((a, b) => {
      const ta = instant(a.suspendedAt);
      const tb = instant(b.suspendedAt);
      if (ta !== tb) return ta < tb ? -1 : 1;
      const ka = a.runId + a.id;
      const kb = b.runId + b.id;
      return ka < kb ? -1 : ka > kb ? 1 : 0;
    });
  }

  /**
   * Up to `limit` interrupts waiting for a decision after cursor `after` (0:
   * from the start), in the order they entered the pending index, and the
   * cursor of the next page (0: none follows).
   */
  async pendingPage(after = 0, limit = 50): Promise<{ entries: PendingInterrupt[]; next: number }> {
    if (!Number.isInteger(limit) || limit < 1 || !Number.isInteger(after) || after < 0) {
      throw new RangeError(`pendingPage: limit must be at least 1 and after at least 0 (got ${limit}, ${after})`);
    }
    const stream = "KV_" + this.ns.bucket("pending");
    const entries: PendingInterrupt[] = [];
    let start = after + 1;
    while (entries.length < limit) {
      const { messages, more } = await direct.batch(
        this.nc,
        this.inboxPrefix ?? "_INBOX",
        stream,
        ">",
        start,
        limit - entries.length,
        this.timeoutMs,
      );
      for (const m of messages) {
        start = m.seq + 1;
        const op = m.headers?.get("KV-Operation") ?? "";
        if (op === "DEL" || op === "PURGE" || m.data.length === 0) continue;
        // An answer the server stored here for another user, not the
        // coordinator's put: a direct get's (its headers), or a pull's
        // (stored under its work item's subject, not a key's).
        if (!m.published || !m.subject.startsWith(`$KV.${this.ns.bucket("pending")}.`)) continue;
        const v: unknown = JSON.parse(text(m.data));
        if (isObject(v)) entries.push(v as PendingInterrupt);
      }
      if (!more) return { entries, next: 0 };
    }
    return { entries, next: start - 1 };
  }

  /** The run's lifecycle and audit events, oldest first (type and run from each entry's subject, never its body). */
  async events(runId: string): Promise<StoredEvent[]> {
    return (await this.eventsAfter(runId, 0)).events;
  }

  private async eventsAfter(runId: string, after: number): Promise<{ events: StoredEvent[]; last: number }> {
    const msgs = await direct.messages(
      this.nc,
      this.inboxPrefix ?? "_INBOX",
      this.ns.stream("EVENTS"),
      this.ns.runEvents(runId),
      after + 1,
      undefined,
      this.timeoutMs,
    );
    const events: StoredEvent[] = [];
    for (const m of msgs) {
      after = m.seq;
      if (!m.published) continue; // an answer the server stored here for another user, not the coordinator's entry
      const ev = this.ns.storedEvent(m.subject, m.data);
      if (ev) events.push(ev);
    }
    return { events, last: after };
  }
}

const RFC3339 = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$/i;

/** An RFC 3339 time in nanoseconds since the epoch, for ordering as Go orders times; an unreadable one sorts last. */
function instant(t: unknown): bigint {
  const never = 1n << 80n;
  const m = typeof t === "string" ? RFC3339.exec(t) : null;
  if (!m) return never;
  const whole = Date.parse(m[1]! + (m[3]!.toUpperCase() === "Z" ? "Z" : m[3]!));
  if (Number.isNaN(whole)) return never;
  return BigInt(whole) * 1_000_000n + BigInt((m[2] ?? "").padEnd(9, "0"));
}

/** Whether a publish failed because the stream could not take it for now (no leader, a timeout, JetStream's 503). */
function retryable(e: unknown): boolean {
  if (e instanceof TimeoutError || e instanceof NoRespondersError) return true;
  if (e instanceof JetStreamApiError) return e.status === 503;
  const cause = e instanceof Error ? e.cause : undefined;
  return cause !== undefined && cause !== e && retryable(cause);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function withDeadline<T>(p: Promise<T>, deadline: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Timeout(message)), Math.max(deadline - Date.now(), 0));
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
