/** The worker: runs the passes of registered agents. */

import { createHash } from "node:crypto";

import { headers as natsHeaders, type MsgHdrs, type NatsConnection } from "@nats-io/nats-core";
import {
  AckPolicy,
  DeliverPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  jetstream,
  jetstreamManager,
  type Consumer,
  type ConsumerMessages,
  type JetStreamClient,
  type JsMsg,
} from "@nats-io/jetstream";

import * as direct from "./direct.js";
import { InterlockError, InvalidToken, PassTimeout, ProtocolError, Retry, Suspended, WorkerStopping } from "./errors.js";
import { deadLetterMsgId, emitMsgId, nonce, outcomeMsgId, passKey } from "./ids.js";
import { encode, isObject, toJson, type JsonObject, type JsonValue } from "./json.js";
import { PassState, runInPass, type EmitFn } from "./run.js";
import { DEFAULT_PREFIX, Namespace, validateToken, workerDurable } from "./subjects.js";
import { childTraceparent } from "./trace.js";
import type { RunInfo } from "./types.js";
import { askMessage, decodeWork, MAX_DEPTH, notPublished, takeAskReply, valueDeeper, versioned } from "./wire.js";

/**
 * How long one pull request of a worker waits at the server for messages,
 * and how often the server says it still holds an idle one: a request lost
 * in a failover is replaced after two missed heartbeats. On a cluster
 * nats-server proposes every pull request to the consumer's Raft group when
 * it arrives and again when it ends (issue 25, docs/benchmarks.md), so a
 * long-lived request costs two Raft entries per batch, where one that
 * expired each second cost two per idle second.
 */
const FETCH_EXPIRES_MS = 10_000;
const FETCH_HEARTBEAT_MS = 1000;
/** How often a worker reads its consumer's ack wait again by default, as the Go worker does. */
const CONFIG_READ_MS = 30_000;

/**
 * The waits between pull requests that fail in a row: 100 ms, doubling up
 * to 2 s, so a failover (a consumer without a leader for a second or two)
 * delays work by at most about that, and a refusal for good costs one
 * request every 2 s, not thousands a second. The fourth failure in a row
 * is worth a warning, and every 30th after it.
 */
export class Backoff {
  private waitMs = 0;
  /** Failures in a row. */
  streak = 0;

  /** One more failure: the wait before the next request, in ms, and whether it is worth a warning. */
  failed(): { wait: number; warn: boolean } {
    this.streak++;
    this.waitMs = Math.min(Math.max(2 * this.waitMs, 100), 2000);
    const over = this.streak - 4;
    return { wait: this.waitMs, warn: over >= 0 && over % 30 === 0 };
  }

  /** A request was filled or expired: the next one goes at once. */
  reset(): void {
    this.waitMs = 0;
    this.streak = 0;
  }
}

/**
 * What one pull request asks for at most: messages, how long it waits at
 * the server (ms), and how often the server says it still holds it (ms).
 * It stays within what the consumer allows (`max_batch`, `max_expires`,
 * set by an operator): asked for more, the server refuses every request
 * with status 409. The heartbeat stays at most a quarter of the wait (the
 * server refuses one over half), and both are whole milliseconds: nats.js
 * sends them as nanoseconds, which the server must read as integers.
 * nats.js also asks for at least 1 s and a heartbeat of at least 500 ms
 * (`tooShort` says when a consumer allows less).
 */
export interface RequestLimits {
  batch: number;
  expires: number;
  heartbeat: number;
  /** The consumer's `max_expires` is below the 1 s nats.js asks for at least: every request is refused. */
  tooShort: boolean;
}

/** The request limits of a consumer with this configuration. */
export function limitsOf(config: { max_batch?: number; max_expires?: number }): RequestLimits {
  const batch = config.max_batch && config.max_batch > 0 ? config.max_batch : Number.MAX_SAFE_INTEGER;
  const maxExpires = config.max_expires && config.max_expires > 0 ? Math.floor(config.max_expires / 1_000_000) : Infinity;
  const expires = Math.max(Math.min(FETCH_EXPIRES_MS, maxExpires), 1000);
  const heartbeat = Math.max(Math.min(FETCH_HEARTBEAT_MS, Math.floor(expires / 4)), 500);
  return { batch, expires, heartbeat, tooShort: maxExpires < 1000 };
}

/** Whether a pull request ended because two of the server's heartbeats were missed (it was lost with its server): nats.js says so in a JetStreamError without a status code. */
function heartbeatsMissed(ended: unknown): boolean {
  return ended instanceof Error && ended.message === "heartbeats missed";
}

/** What an agent body receives beside the run's input. */
export interface PassContext {
  /** Aborted when the pass runs over the worker's pass timeout ({@link PassTimeout}) or the worker stops ({@link WorkerStopping}). Pass it on to every call. */
  signal: AbortSignal;
  /** The run and pass. */
  run: RunInfo;
}

/** An agent body: one pass of a run, given the run's input. It runs again from the top on every replay. */
export type AgentBody = (input: JsonValue | undefined, ctx: PassContext) => unknown;

/** Where the worker reports what it could not do. */
export interface Logger {
  warn(message: string): void;
  error(message: string): void;
}

/** Options of a {@link Worker}. */
export interface WorkerOptions {
  /** The subject prefix (default `interlock`). */
  prefix?: string;
  /** Work items each agent holds and runs at once (default 4). */
  concurrency?: number;
  /** The consumer's ack wait, used when the worker creates `worker_<agent>` (default 30,000 ms). In-progress acks go every half of the consumer's ack wait as last read (every 30 s), and a body whose signal was aborted gets as long to return. */
  ackWaitMs?: number;
  /** How often the worker reads its consumer's ack wait again, to follow one an operator changed (default 30,000 ms). */
  configReadMs?: number;
  /** The consumer's max deliveries (default 10); on the last, a pass that cannot report is dead-lettered. */
  maxDeliver?: number;
  /** A pass's signal is aborted after this long (default 300,000 ms, as the Go worker's 5 minutes); the pass is retried, and on its last delivery the run fails. */
  passTimeoutMs?: number;
  /** Delays before a retried pass is delivered again, by attempt (default 100 ms, 1 s, 5 s, 30 s). */
  backoffMs?: number[];
  /** Create `worker_<agent>` when it is missing and the user may (default true). */
  createConsumers?: boolean;
  /** The connection's inbox prefix, for direct-get replies (default `_INBOX`). */
  inboxPrefix?: string;
  /** Timeout of each read and publish (default 5,000 ms). */
  timeoutMs?: number;
  /** Where warnings go (default the console). */
  logger?: Logger;
  /**
   * Make {@link interruptAsync} ask the coordinator, before suspending,
   * whether an operator rule settles the interrupt (protocol version 2; Go:
   * `WorkerConfig.AskRules`): a settled interrupt costs one round trip
   * instead of a suspension and a replay. Without an answer within
   * `askTimeoutMs` the pass suspends as usual. Turn it on where operator
   * rules settle many calls (`interlock serve --policies`); without rules it
   * is one wasted round trip per interrupt. Default false.
   */
  askRules?: boolean;
  /** Bounds one ask (default 2,000 ms). */
  askTimeoutMs?: number;
}

interface Work extends JsonObject {
  runId: string;
  agent: string;
}

interface Held {
  done: Promise<void>;
  abort: (reason: Error) => void;
}

/**
 * Consumes work items of registered agents, runs the body, and publishes the
 * pass's one outcome (suspension, completion or failure).
 *
 * It binds to the durable consumer `worker_<agent>` on the work stream
 * (creating it when missing and `createConsumers` allows), so it shares an
 * agent's work with the Go and Python workers of that agent. It holds at most
 * `concurrency` work items per agent, sends in-progress acks every half ack
 * wait from the moment an item arrives, aborts a pass's signal after
 * `passTimeoutMs` (the pass is retried; on the last delivery the run fails),
 * and before running a pass checks on every delivery that the pass has not
 * already reported (the runs stream holds its outcome).
 */
export class Worker {
  private readonly nc: NatsConnection;
  private readonly js: JetStreamClient;
  private readonly ns: Namespace;
  private readonly concurrency: number;
  private readonly ackWaitMs: number;
  private readonly configReadMs: number;
  /** Each agent's consumer's ack wait (ms), as last read. */
  private readonly boundAckWait = new Map<string, number>();
  /** Each agent's held items' heartbeats, to beat at once when its ack wait changes. */
  private readonly beats = new Map<string, Set<() => void>>();
  private readonly maxDeliver: number;
  private readonly passTimeoutMs: number;
  private readonly backoffMs: number[];
  private readonly createConsumers: boolean;
  private readonly inboxPrefix: string;
  private readonly timeoutMs: number;
  private readonly log: Logger;
  private readonly askRules: boolean;
  private readonly askTimeoutMs: number;
  private readonly agents = new Map<string, AgentBody>();
  private readonly loops: Promise<void>[] = [];
  private readonly held = new Set<Held>();
  private readonly fetches = new Set<ConsumerMessages>();
  private stopping = false;
  private stopped!: () => void;
  private readonly stopSignal = new Promise<void>((resolve) => (this.stopped = resolve));

  constructor(nc: NatsConnection, options: WorkerOptions = {}) {
    const concurrency = options.concurrency ?? 4;
    if (!Number.isInteger(concurrency) || concurrency < 1) throw new RangeError("concurrency must be an integer of at least 1");
    this.nc = nc;
    this.js = jetstream(nc);
    this.ns = new Namespace(options.prefix ?? DEFAULT_PREFIX);
    this.concurrency = concurrency;
    this.ackWaitMs = options.ackWaitMs ?? 30_000;
    this.configReadMs = options.configReadMs ?? CONFIG_READ_MS;
    this.maxDeliver = options.maxDeliver ?? 10;
    this.passTimeoutMs = options.passTimeoutMs ?? 300_000;
    this.backoffMs = options.backoffMs?.length ? [...options.backoffMs] : [100, 1000, 5000, 30_000];
    this.createConsumers = options.createConsumers ?? true;
    this.inboxPrefix = options.inboxPrefix ?? "_INBOX";
    this.timeoutMs = options.timeoutMs ?? 5000;
    this.log = options.logger ?? console;
    this.askRules = options.askRules ?? false;
    this.askTimeoutMs = options.askTimeoutMs ?? 2000;
  }

  private isStopping(): boolean {
    return this.stopping;
  }

  /** The subjects this worker uses. */
  get namespace(): Namespace {
    return this.ns;
  }

  /** Add an agent. Register before {@link start}. */
  register(name: string, body: AgentBody): this {
    validateToken("agent", name);
    if (this.loops.length > 0) throw new InterlockError("register agents before start");
    this.agents.set(name, body);
    return this;
  }

  /** Bind a consumer per agent and start taking work. */
  async start(): Promise<void> {
    if (this.loops.length > 0 || this.stopping) throw new InterlockError("worker already started");
    const bound = [];
    for (const name of this.agents.keys()) bound.push(await this.bind(name));
    for (const [i, [name, body]] of [...this.agents].entries()) {
      this.loops.push(this.loop(name, body, bound[i]!));
    }
  }

  /**
   * Stop taking work and wait for the passes under way; after `timeoutMs`
   * (default: wait for them) abort their signals with {@link WorkerStopping}
   * and hand their work items back (another worker runs them later).
   */
  async stop(timeoutMs?: number): Promise<void> {
    this.stopping = true;
    this.stopped();
    for (const f of this.fetches) f.stop();
    await Promise.allSettled(this.loops);
    const passes = [...this.held];
    if (passes.length === 0) return;
    const all = Promise.allSettled(passes.map((h) => h.done));
    if (timeoutMs === undefined) {
      await all;
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    const late = await Promise.race([
      all.then(() => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), timeoutMs))),
    ]);
    clearTimeout(timer);
    if (late) {
      for (const h of this.held) h.abort(new WorkerStopping("the worker is stopping"));
      await all;
    }
  }

  /** `await using worker = ...`: stops the worker. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  private async bind(agent: string): Promise<Consumer> {
    const stream = this.ns.stream("WORK");
    const durable = workerDurable(agent);
    try {
      return await this.js.consumers.get(stream, durable);
    } catch (e) {
      if (!this.createConsumers || !(e instanceof JetStreamApiError && e.code === JetStreamApiCodes.ConsumerNotFound)) {
        throw e;
      }
    }
    const jsm = await jetstreamManager(this.nc);
    await jsm.consumers.add(stream, {
      durable_name: durable,
      filter_subjects: this.ns.agentWork(agent),
      ack_policy: AckPolicy.Explicit,
      ack_wait: this.ackWaitMs * 1_000_000,
      max_deliver: this.maxDeliver,
      max_ack_pending: 1024,
      deliver_policy: DeliverPolicy.All,
    });
    return await this.js.consumers.get(stream, durable);
  }

  private async loop(
    agent: string,
    body: AgentBody,
    consumer: Consumer,
  ): Promise<void> {
    // One pull request at a time for all the free room: messages are
    // handled as they arrive on it, and room they free waits for the next
    // request, sent when this one is filled or ends (issue 25: on a cluster
    // every request is two Raft entries of the consumer). Each fetch has an
    // inbox of its own, so messages of a request given up on are never held.
    const mine = new Set<Promise<void>>();
    const backoff = new Backoff();
    const bound = (await consumer.info(true)).config;
    this.noteAckWait(agent, bound);
    const limits = limitsOf(bound);
    if (limits.tooShort) this.warnLimits(agent, limits);
    // The consumer read again every configReadMs, also while every place is
    // taken or a request waits: an operator may have changed its ack wait.
    const reread = setInterval(() => void this.rereadAckWait(agent, consumer), this.configReadMs);
    try {
      await this.pullLoop(agent, body, consumer, mine, backoff, limits);
    } finally {
      clearInterval(reread);
    }
  }

  private async pullLoop(
    agent: string,
    body: AgentBody,
    consumer: Consumer,
    mine: Set<Promise<void>>,
    backoff: Backoff,
    limits: RequestLimits,
  ): Promise<void> {
    while (!this.stopping) {
      const free = this.concurrency - mine.size;
      if (free === 0) {
        await Promise.race([...mine, this.stopSignal]);
        continue;
      }
      let fetched: ConsumerMessages;
      try {
        fetched = await consumer.fetch({
          max_messages: Math.min(free, limits.batch),
          expires: limits.expires,
          idle_heartbeat: limits.heartbeat,
        });
      } catch (e) {
        if (this.nc.isClosed() || this.isStopping()) return;
        await this.backOff(backoff, agent, e);
        limits = await this.relimit(agent, consumer, limits);
        continue;
      }
      this.fetches.add(fetched);
      let got = 0;
      let ended: unknown;
      try {
        for await (const m of fetched) {
          got++;
          if (this.isStopping()) {
            m.nak();
            continue;
          }
          const p = this.hold(agent, body, m);
          mine.add(p);
          void p.finally(() => mine.delete(p));
        }
      } catch (e) {
        ended = e;
      } finally {
        this.fetches.delete(fetched);
      }
      if (this.nc.isClosed() || this.isStopping()) return;
      if (got > 0 || ended === undefined || heartbeatsMissed(ended)) {
        // Filled, expired, or lost with its server: asked again at once.
        backoff.reset();
        continue;
      }
      // Ended with nothing: a status 409 (a leadership change, the consumer
      // deleted, a limit of the consumer lowered since it was read), 400 (a
      // request the consumer cannot take), 503 (no consumer leader yet), or
      // an error of the client. Asked again at
      // once, a request can be refused as fast, for good. The consumer's
      // limits are read again: an operator may have lowered them.
      await this.backOff(backoff, agent, ended);
      limits = await this.relimit(agent, consumer, limits);
    }
  }

  /** Takes the ack wait of an agent's consumer's configuration; when it changed, its held items beat at once and then by the new one. */
  private noteAckWait(agent: string, config: { ack_wait?: number }): void {
    if (!config.ack_wait || config.ack_wait <= 0) return;
    const next = Math.floor(config.ack_wait / 1_000_000);
    const was = this.boundAckWait.get(agent);
    this.boundAckWait.set(agent, next);
    if (was === undefined || was === next) return;
    this.log.warn(`interlock worker: the consumer of ${agent} now waits ${next} ms for acks; heartbeats follow`);
    for (const kick of this.beats.get(agent) ?? []) kick();
  }

  /** Reads the ack wait of an agent's consumer again; a failure changes nothing (the next request says so). */
  private async rereadAckWait(agent: string, consumer: Consumer): Promise<void> {
    if (this.isStopping() || this.nc.isClosed()) return;
    try {
      this.noteAckWait(agent, (await consumer.info()).config);
    } catch {
      // gone or unreachable
    }
  }

  /** The ack wait (ms) of an agent's consumer as last read; the worker's own until it was. */
  private ackWaitOf(agent: string): number {
    return this.boundAckWait.get(agent) ?? this.ackWaitMs;
  }

  /** Reads the consumer's request limits and ack wait again after a failed request; the old limits when it cannot or the worker stops. */
  private async relimit(agent: string, consumer: Consumer, old: RequestLimits): Promise<RequestLimits> {
    if (this.isStopping() || this.nc.isClosed()) return old;
    let limits: RequestLimits;
    try {
      const config = (await consumer.info()).config;
      this.noteAckWait(agent, config);
      limits = limitsOf(config);
    } catch {
      return old; // gone or unreachable: the next request says so
    }
    if (limits.batch !== old.batch || limits.expires !== old.expires || limits.tooShort !== old.tooShort) {
      this.warnLimits(agent, limits);
    }
    return limits;
  }

  /** Says what the consumer's request limits allow, or that nats.js cannot ask within them. */
  private warnLimits(agent: string, limits: RequestLimits): void {
    if (limits.tooShort) {
      this.log.error(
        `interlock worker: the consumer of ${agent} allows pull requests shorter than the 1 s nats.js asks for at least (max_expires); every request is refused until an operator raises it`,
      );
      return;
    }
    this.log.warn(
      `interlock worker: the consumer of ${agent} allows ${limits.batch === Number.MAX_SAFE_INTEGER ? "any number of" : limits.batch} messages and ${limits.expires} ms per pull request; asking within that`,
    );
  }

  /** Logs a failed pull request (a warning once failures in a row last) and waits before the next one, or until the worker stops. */
  private async backOff(backoff: Backoff, agent: string, e: unknown): Promise<void> {
    const { wait, warn } = backoff.failed();
    if (warn) {
      this.log.warn(
        `interlock worker: pull request for ${agent} failed ${backoff.streak} times in a row; asking again in ${wait} ms: ${(e as Error).message}`,
      );
    }
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([new Promise<void>((ok) => (timer = setTimeout(ok, wait))), this.stopSignal]);
    clearTimeout(timer);
  }

  private hold(agent: string, body: AgentBody, m: JsMsg): Promise<void> {
    const ac = new AbortController();
    // In-progress acks from the moment the item arrives, so a queued item is
    // never handed to a second worker: every half of the consumer's ack wait
    // as read at each beat, and at once when a read finds it changed.
    let timer: NodeJS.Timeout | undefined;
    const beat = (): void => {
      timer = setTimeout(() => {
        m.working();
        beat();
      }, Math.max(this.ackWaitOf(agent) / 2, 10));
    };
    const kick = (): void => {
      clearTimeout(timer);
      m.working();
      beat();
    };
    beat();
    const beats = this.beats.get(agent) ?? new Set<() => void>();
    this.beats.set(agent, beats.add(kick));
    const held: Held = { done: Promise.resolve(), abort: (reason) => ac.abort(reason) };
    held.done = this.handle(agent, body, m, ac)
      .catch((e: unknown) => this.log.error(`interlock worker: ${(e as Error).message}`))
      .finally(() => {
        beats.delete(kick);
        clearTimeout(timer);
        this.held.delete(held);
      });
    this.held.add(held);
    return held.done;
  }

  private async handle(agent: string, body: AgentBody, m: JsMsg, ac: AbortController): Promise<void> {
    const deliveries = m.info.deliveryCount;
    // A start or replay is a client's or the coordinator's publish, never an
    // API answer another user had the server send to this subject.
    const headers = direct.readHeaders(m);
    const reason =
      headers === null
        ? "not a client's publish: its header block is one nats.js cannot read (nats-server stored it as sent)"
        : notPublished(headers);
    if (reason !== undefined) return this.deadLetter(agent, m, `work item: ${reason}`);
    let work: Work;
    try {
      work = decodeWork(m.data) as Work;
    } catch (e) {
      if (e instanceof ProtocolError) return this.deadLetter(agent, m, `work item: ${e.message}`);
      throw e;
    }
    if (work.agent !== agent) {
      return this.deadLetter(agent, m, `work item for agent '${work.agent}' arrived on ${m.subject}`);
    }
    const pass = typeof work["pass"] === "number" ? work["pass"] : 0;
    const decisions = Array.isArray(work["decisions"]) ? work["decisions"] : [];
    // An empty journal is as left out (Go and Python start such a run).
    const journal = work["journal"];
    const firstPass = pass === 0 && decisions.length === 0 && !(isObject(journal) && Object.keys(journal).length > 0);
    let requester: string | undefined;
    try {
      requester = this.ns.requesterOf(agent, m.subject);
    } catch (e) {
      if (e instanceof InvalidToken) return this.deadLetter(agent, m, `work item on ${m.subject}: ${e.message}`);
      throw e;
    }
    if (requester !== undefined && !firstPass) {
      // Only the coordinator publishes replays (on the work subject):
      // whoever may start a run may not hand a body decisions.
      return this.deadLetter(
        agent,
        m,
        `malformed: a work item on ${m.subject} must be a first pass; replays come from the coordinator`,
      );
    }
    const key = passKey(m.headers?.get("Nats-Msg-Id") ?? "", m.data);
    try {
      if (await this.passDone(work, pass, key)) {
        m.ack();
        return;
      }
      const traceparent = childTraceparent(m.headers?.get("traceparent") || undefined);
      const info: RunInfo = {
        runId: work.runId,
        agent,
        pass,
        threadId: typeof work["threadId"] === "string" ? work["threadId"] : "",
        traceparent,
      };
      let outcome: { subject: string; msg: JsonObject; finished?: PassState["finished"] };
      try {
        outcome = await this.runPass(body, work, info, key, ac, requester ?? "");
      } catch (e) {
        if (!(e instanceof PassTimeout) || deliveries < this.maxDeliver) throw e;
        // The last attempt timed out too: the run fails, as with Go.
        this.log.warn(`interlock worker: pass timed out on its last attempt; the run fails: ${e.message}`);
        const failed = new PassTimeout(
          `pass timed out after ${this.passTimeoutMs} ms (attempt ${deliveries} of ${this.maxDeliver})`,
        );
        outcome = this.outcome(work, pass, new PassState(info, [], {}, ac.signal), undefined, failed);
      }
      const h = natsHeaders();
      h.set("traceparent", traceparent);
      await this.publishOutcome(outcome.subject, encode(outcome.msg), outcomeMsgId(work.runId, pass, key), h);
      m.ack();
      if (outcome.subject !== this.ns.suspended(agent, work.runId)) {
        for (const fn of outcome.finished ?? []) {
          try {
            await fn();
          } catch (e) {
            this.log.warn(`interlock worker: an onRunFinished callback of run ${work.runId} failed: ${(e as Error).message}`);
          }
        }
      }
    } catch (e) {
      if (e instanceof WorkerStopping) {
        // Handed back, but never after its last delivery: the server would
        // not deliver it again, and nothing would dead-letter it.
        if (deliveries >= this.maxDeliver) return this.deadLetter(agent, m, `gave up after ${deliveries} deliveries: ${e.message}`);
        m.nak();
        return;
      }
      if (!(e instanceof Retry) && !(e instanceof PassTimeout)) {
        this.log.warn(`interlock worker: pass failed to report; will retry: ${(e as Error).message}`);
      }
      await this.retry(agent, m, deliveries, e as Error);
    }
  }

  /**
   * Publish a pass's outcome, repeating it (same message id, so it is
   * stored once) for up to 15 s while the stream cannot take it, as the Go
   * worker does: a leader election on a cluster takes 4 to 9 s, and a pass
   * whose outcome is not stored runs again.
   */
  private async publishOutcome(subject: string, data: Uint8Array, msgID: string, h: MsgHdrs): Promise<void> {
    const deadline = Date.now() + 15_000;
    for (let wait = 100; ; wait = Math.min(wait * 2, 2000)) {
      try {
        await this.js.publish(subject, data, { msgID, headers: h, timeout: this.timeoutMs });
        return;
      } catch (e) {
        if (this.isStopping() || this.nc.isClosed() || Date.now() + wait > deadline) throw e;
        this.log.warn(`interlock worker: publishing the outcome on ${subject} failed; repeating it: ${(e as Error).message}`);
        await delay(wait);
      }
    }
  }

  private async retry(agent: string, m: JsMsg, deliveries: number, err: Error): Promise<void> {
    if (deliveries >= this.maxDeliver) {
      return this.deadLetter(agent, m, `gave up after ${deliveries} deliveries: ${err.message}`);
    }
    m.nak(this.backoffMs[Math.min(deliveries - 1, this.backoffMs.length - 1)]);
  }

  /**
   * Whether this pass (with `key`) was already reported, from the run's last
   * message on the agent's own subjects of the runs stream, as the Go worker
   * decides: this pass's outcome (told by its message id, which only a
   * holder of the work item can compute), an outcome of a later pass, or a
   * coordinator's notice about this pass or a later one. A forged outcome of
   * this pass does not count.
   */
  private async passDone(work: Work, want: number, key: string): Promise<boolean> {
    const runs = this.ns.stream("RUNS");
    const last = await direct.last(this.nc, this.inboxPrefix, runs, this.ns.runOutcomes(work.agent, work.runId), this.timeoutMs);
    if (!last) return false;
    const first = this.judgePass(work, want, key, last);
    if (!first.notice || first.done || first.pass >= want) return first.done;
    // A notice about an earlier pass: the coordinator publishes an expiry's
    // after it queued the replay, whose outcome can be stored before it.
    // Judge by the run's last outcome instead.
    let latest: direct.Stored | null = null;
    const ns = this.ns;
    const subjects = [ns.suspended(work.agent, work.runId), ns.completed(work.agent, work.runId), ns.failed(work.agent, work.runId)];
    for (const subject of subjects) {
      const m = await direct.last(this.nc, this.inboxPrefix, runs, subject, this.timeoutMs);
      if (m && (!latest || m.seq > latest.seq)) latest = m;
    }
    return latest ? this.judgePass(work, want, key, latest).done : false;
  }

  /** passDone's rules applied to `last`: whether the pass is done, whether `last` is a coordinator's notice, and its pass. */
  private judgePass(work: Work, want: number, key: string, last: direct.Stored): { done: boolean; notice: boolean; pass: number } {
    const no = { done: false, notice: false, pass: 0 };
    let got: number;
    try {
      const head: unknown = JSON.parse(new TextDecoder().decode(last.data));
      const p = (head as { pass?: unknown }).pass ?? 0;
      if (typeof p !== "number") return no;
      got = p;
    } catch {
      return no;
    }
    const tokens = last.subject.split(".");
    const prefix = this.ns.prefix.split(".").length;
    if (tokens.length !== prefix + 3 || tokens[prefix + 1] !== work.agent || tokens[prefix + 2] !== work.runId) {
      return no;
    }
    const notice = ["reminder", "escalated", "expired"].includes(tokens[prefix]!);
    if (got !== want) return { done: got > want, notice, pass: got };
    if (notice) return { done: true, notice, pass: got };
    return { done: last.headers?.get("Nats-Msg-Id") === outcomeMsgId(work.runId, want, key), notice, pass: got };
  }

  private async runPass(
    body: AgentBody,
    work: Work,
    info: RunInfo,
    key: string,
    ac: AbortController,
    requester = "",
  ): Promise<{ subject: string; msg: JsonObject; finished: PassState["finished"] }> {
    const decisions = (Array.isArray(work["decisions"]) ? work["decisions"] : []) as JsonObject[];
    const journal = (work["journal"] ?? {}) as JsonObject;
    const p = new PassState(info, decisions, journal, ac.signal, this.emitter(work, key));
    if (this.askRules) p.ask = this.asker(work, info.pass, requester);
    const timer = setTimeout(
      () => ac.abort(new PassTimeout(`pass ${info.pass} of run ${info.runId} ran over ${this.passTimeoutMs} ms`)),
      this.passTimeoutMs,
    );
    const ran = runInPass(p, () => Promise.resolve().then(() => body(work["input"], { signal: ac.signal, run: info })));
    const aborted = new Promise<never>((_, reject) => {
      const fail = (): void => {
        // Give the body half an ack wait to honour its signal, as Go does;
        // its item stays held (in-progress acks) meanwhile. Only the grace
        // running out rejects: a body that ends within it is heard.
        const grace = setTimeout(() => reject(ac.signal.reason as Error), this.ackWaitOf(info.agent) / 2);
        const stop = (): void => clearTimeout(grace);
        ran.then(stop, stop);
      };
      if (ac.signal.aborted) fail();
      else ac.signal.addEventListener("abort", fail, { once: true });
    });
    aborted.catch(() => undefined);
    const ended = ran.then(
      (value: unknown) => ({ returned: true as const, value }),
      (error: unknown) => ({ returned: false as const, error }),
    );
    let result: unknown;
    let err: unknown;
    try {
      const got = await Promise.race([ended, aborted]);
      if (got.returned) result = got.value;
      else err = got.error;
    } finally {
      clearTimeout(timer);
    }
    if (ac.signal.aborted && err !== undefined && p.pending.length === 0) {
      // Cut short (timeout or stop) with nothing to show, as Go does: the
      // pass is handed on, or fails on its last attempt. A body that
      // returned within the grace, or suspended, is reported.
      throw ac.signal.reason as Error;
    }
    if (err instanceof Retry) {
      if (p.pending.length === 0) throw err;
      err = undefined; // interrupts were raised: the pass suspends on them
    }
    return { ...this.outcome(work, info.pass, p, result, err, requester), finished: p.finished };
  }

  private asker(work: Work, pass: number, requester: string): (interrupt: JsonObject) => Promise<JsonObject | undefined> {
    const subject = this.ns.ask(work.agent, work.runId);
    return async (interrupt) => {
      const msg = askMessage(work.runId, work.agent, pass, requester, interrupt);
      try {
        const reply = await this.nc.request(subject, JSON.stringify(msg), { timeout: this.askTimeoutMs });
        return takeAskReply(reply.data, interrupt["id"] as string);
      } catch {
        // No coordinator, no rules, a timeout: suspend as usual.
        return undefined;
      }
    };
  }

  private outcome(
    work: Work,
    pass: number,
    p: PassState,
    result: unknown,
    err: unknown,
    requester = "",
  ): { subject: string; msg: JsonObject } {
    const ref: JsonObject = { version: 1, runId: work.runId, agent: work.agent };
    if (work["threadId"]) ref["threadId"] = work["threadId"];
    ref["pass"] = pass;
    if (work["input"] !== undefined && work["input"] !== null) ref["input"] = work["input"];
    const now = new Date().toISOString();
    const journal = Object.fromEntries(p.journal);
    if (p.requestErrors.length > 0) {
      // A request that could not be published fails the run rather than let
      // the pass end without asking.
      err = p.requestErrors[0];
    } else if (p.pending.length > 0) {
      const msg: JsonObject = { ...ref, interrupts: [...p.pending] };
      if (p.journal.size > 0) msg["journal"] = journal;
      msg["suspendedAt"] = now;
      // Who started the run, as the start subject's last token says (NATS
      // permissions bind it); never a body field.
      if (requester && pass === 0) msg["requester"] = requester;
      versioned("suspension", msg);
      // Refused here rather than by the coordinator, which refuses what no
      // reader takes: the run fails with the reason.
      if (!valueDeeper(msg)) return { subject: this.ns.suspended(work.agent, work.runId), msg };
      err = new Error(tooDeep("suspension (its journal)"));
    } else if (err === undefined) {
      try {
        if (result !== undefined && valueDeeper(result, MAX_DEPTH - 1)) throw new Error(tooDeep("result"));
        const msg: JsonObject = { ...ref };
        if (result !== undefined) msg["result"] = toJson(result, "result");
        if (p.journal.size > 0) msg["journal"] = journal;
        msg["completedAt"] = now;
        if (valueDeeper(msg)) throw new Error(tooDeep("completion (its journal)"));
        return { subject: this.ns.completed(work.agent, work.runId), msg };
      } catch (e) {
        err = new TypeError(`result cannot be marshalled: ${(e as Error).message}`);
      }
    }
    let text: string;
    if (err instanceof Suspended) text = "the body threw Suspended without an interrupt";
    else if (err instanceof Error) text = err.message || err.name;
    else text = String(err) || "the body failed";
    return { subject: this.ns.failed(work.agent, work.runId), msg: { ...ref, error: text, failedAt: now } };
  }

  /**
   * Stores the AG-UI events of the pass, each acked before `emit` returns,
   * so they are all kept before the pass's outcome. A replay sends nothing
   * twice, whatever the body emits between interrupts (the rule of Go's
   * worker, with the same headers):
   *
   * - The calls a pass makes before its first undecided interrupt are
   *   settled: a replay makes the same calls first, in order. The n-th call
   *   is skipped while n is below the settled count the run kept.
   * - The calls after an undecided interrupt are tentative: a replay, which
   *   now acts on that interrupt, may emit them again later, after what
   *   acting emits. A call past the settled ones is skipped when an event
   *   with its digest is kept and not yet placed, else stored.
   *
   * Both are read at the pass's first emit from the last event kept, and
   * each stored event carries them as they stand after it
   * (`Interlock-Emit-Settled`, `Interlock-Emit-Tentative`).
   */
  private emitter(work: Work, key: string): EmitFn {
    const subject = this.ns.agui(work.agent, work.runId);
    let kept: Promise<EmitState> | undefined;
    let unsettled = false; // an undecided interrupt came before
    return async (n, event, suspended) => {
      kept ??= this.keptEvents(work.runId, subject);
      const s = await kept;
      // From here to the header, synchronous: calls in flight at once
      // update the state in the order they were made.
      const data = encode(event);
      const digest = emitDigest(data);
      unsettled ||= suspended;
      let skip = n < s.settled;
      if (!skip && (s.tentative.get(digest) ?? 0) > 0) {
        skip = true;
        // Still after an undecided interrupt: still tentative.
        if (unsettled) bump(s.placed, digest, 1);
        bump(s.tentative, digest, -1);
      }
      if (!unsettled) s.settled = Math.max(s.settled, n + 1);
      else if (!skip) bump(s.placed, digest, 1);
      if (skip) return;
      const h = natsHeaders();
      h.set("Interlock-Emit-Settled", String(s.settled));
      const list: string[] = [];
      for (const m of [s.tentative, s.placed]) {
        for (const [d, c] of m) for (let i = 0; i < c; i++) list.push(d);
      }
      list.sort();
      if (list.length > 0) h.set("Interlock-Emit-Tentative", list.join(","));
      await this.js.publish(subject, data, { msgID: emitMsgId(work.runId, n, key), headers: h, timeout: this.timeoutMs });
    };
  }

  /**
   * What the AG-UI events the run kept on `subject` say to a new pass, read
   * from the last one with one direct get naming the subject: its settled
   * count and tentative digests. An event stored without them (by an older
   * worker) settles n+1 calls, the n of its message id.
   */
  private async keptEvents(run: string, subject: string): Promise<EmitState> {
    const s: EmitState = { settled: 0, tentative: new Map(), placed: new Map() };
    const last = await direct.last(this.nc, this.inboxPrefix, this.ns.stream("AGUI"), subject, this.timeoutMs);
    if (!last) return s;
    const id = last.headers?.get("Nats-Msg-Id") ?? "";
    const digits = id.startsWith(run + ":emit:") ? id.slice(run.length + 6).split(":")[0]! : "";
    if (!/^\d+$/.test(digits)) {
      throw new InterlockError(`emit: the last event on ${subject} has message id '${id}', not stored by a worker`);
    }
    s.settled = Number(digits) + 1;
    const settled = last.headers?.get("Interlock-Emit-Settled") ?? "";
    if (settled !== "") {
      if (!/^\d+$/.test(settled)) {
        throw new InterlockError(`emit: the last event on ${subject} has Interlock-Emit-Settled '${settled}', not stored by a worker`);
      }
      s.settled = Number(settled);
    }
    const tentative = last.headers?.get("Interlock-Emit-Tentative") ?? "";
    if (tentative !== "") for (const d of tentative.split(",")) bump(s.tentative, d, 1);
    return s;
  }

  private async deadLetter(agent: string, m: JsMsg, reason: string): Promise<void> {
    const consumer = workerDurable(agent);
    const h = natsHeaders();
    const kept = direct.readHeaders(m); // null: none nats.js can read, none copied
    if (kept) {
      for (const [k, vs] of kept) {
        if (k.toLowerCase() === "nats-msg-id") continue;
        for (const v of vs) h.append(k, v);
      }
    }
    h.set("Interlock-Dlq-Reason", reason);
    h.set("Interlock-Dlq-Subject", m.subject);
    h.set("Interlock-Dlq-Stream", m.info.stream);
    h.set("Interlock-Dlq-Sequence", String(m.info.streamSequence));
    h.set("Interlock-Dlq-Deliveries", String(m.info.deliveryCount));
    h.set("Interlock-Dlq-Consumer", consumer);
    try {
      await this.js.publish(this.ns.deadLetter(consumer), m.data, {
        // A nonce of its own: a predictable id could be stored first by
        // anyone who may write the dead-letter stream, and the item lost.
        msgID: `${deadLetterMsgId(consumer, m.info.stream, m.info.streamSequence)}:${nonce()}`,
        headers: h,
        timeout: this.timeoutMs,
      });
    } catch (e) {
      this.log.error(`interlock worker: dead-letter failed; will retry: ${(e as Error).message}`);
      m.nak(this.backoffMs[this.backoffMs.length - 1]);
      return;
    }
    this.log.warn(`interlock worker: dead-lettered ${m.subject}: ${reason}`);
    m.term(reason.slice(0, 200));
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * What a run's kept AG-UI events say to its next pass: how many emit calls
 * are settled, and the digests of tentative events by count, those not yet
 * met in this pass (tentative) and those met or stored after an undecided
 * interrupt (placed).
 */
interface EmitState {
  settled: number;
  tentative: Map<string, number>;
  placed: Map<string, number>;
}

function bump(m: Map<string, number>, key: string, by: number): void {
  const v = (m.get(key) ?? 0) + by;
  if (v > 0) m.set(key, v);
  else m.delete(key);
}

/** An AG-UI event's digest: 16 hex digits of SHA-256 over its bytes, as Go's worker computes it. */
function emitDigest(data: Uint8Array): string {
  return createHash("sha256").update(data).digest("hex").slice(0, 16);
}

function tooDeep(what: string): string {
  return `the ${what} nests objects and lists deeper than the protocol's ${MAX_DEPTH} levels`;
}
