/**
 * Direct gets (nats-server 2.11+): the last message on a subject, and
 * batched reads, as docs/protocol.md ("Read what is pending, and a run's
 * events") describes. Shared by the worker and the client.
 */

import { createInbox, type Msg, type MsgHdrs, type NatsConnection } from "@nats-io/nats-core";

import { InterlockError } from "./errors.js";

/** What one batch may carry at most. */
export const BATCH_BYTES = 1 << 20;

/** A stored message as a direct get returns it. */
export interface Stored {
  subject: string;
  seq: number;
  headers: MsgHdrs | undefined;
  data: Uint8Array;
  /**
   * Whether it was a client's publish: it carries a `Nats-Msg-Id` and, as
   * stored, none of the headers the server adds to a direct get's answer.
   * False for an answer another user had the server store on this subject
   * (readers of the audit trail skip those).
   */
  published: boolean;
  /**
   * Whether it carries, as stored, a header the server adds to a direct
   * get's answer: an answer another user had the server store on this
   * subject (one asked for without headers carries none, and no
   * `Nats-Msg-Id` either: `published` is false for both).
   */
  answer: boolean;
}

/** The headers nats-server adds to every direct get's answer, after the stored message's own. */
const SERVER_HEADERS = ["Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp"];

function published(h: MsgHdrs | undefined): boolean {
  return !!h?.get("Nats-Msg-Id") && !answer(h);
}

function answer(h: MsgHdrs | undefined): boolean {
  // The server appends its own: a stored one of the same name comes first.
  return SERVER_HEADERS.some((k) => (h?.values(k).length ?? 0) > 1);
}

/**
 * A message's headers (undefined: none), or null when nats.js will not
 * read them: it throws on a name holding a space or a value holding a bare
 * CR or LF, which nats-server stores as sent, so anyone allowed one direct
 * get could have such an answer stored where a reader must step over it.
 * No client's publish of Interlock's carries one.
 */
export function readHeaders(m: { readonly headers?: MsgHdrs | undefined }): MsgHdrs | undefined | null {
  try {
    return m.headers;
  } catch {
    return null;
  }
}

/**
 * The last value of header k in m's raw header block, read line by line as
 * nats-server reads it (for a block nats.js will not read: readHeaders), or
 * "" when there is none or the block cannot be reached.
 */
function rawHeader(m: Msg, k: string): string {
  const raw = m as unknown as { _rdata?: Uint8Array; _msg?: { hdr?: number } };
  const n = raw._msg?.hdr ?? 0;
  if (!raw._rdata || n <= 0) return "";
  let v = "";
  for (const line of new TextDecoder().decode(raw._rdata.subarray(0, n)).split("\r\n")) {
    if (line.startsWith(k + ":")) v = line.slice(k.length + 1).trim();
  }
  return v;
}

/** A queue of messages on one subscription, read with deadlines. */
class Replies {
  private readonly queue: Msg[] = [];
  private wake: (() => void) | undefined;
  readonly sub;

  constructor(nc: NatsConnection, inbox: string, max?: number) {
    this.sub = nc.subscribe(inbox, {
      ...(max === undefined ? {} : { max }),
      callback: (err, m) => {
        if (!err) this.queue.push(m);
        this.wake?.();
      },
    });
  }

  async next(deadline: number): Promise<Msg | undefined> {
    while (this.queue.length === 0) {
      const left = deadline - Date.now();
      if (left <= 0) return undefined;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.wake = undefined;
    }
    return this.queue.shift();
  }
}

/** The server's value of k in a direct get's answer: its last (a publisher's own header of that name comes first). */
function header(m: Msg, k: string): string {
  const h = readHeaders(m);
  if (h === null) return rawHeader(m, k);
  const v = h?.values(k) ?? [];
  return v.length > 0 ? v[v.length - 1]! : "";
}

/** The stored message a direct get's answer m carries, at sequence seq. */
function storedOf(m: Msg, seq: string): Stored {
  const h = readHeaders(m);
  if (h === null) {
    // Not a client's publish: refused by every reader, stepped over by batches.
    return { subject: header(m, "Nats-Subject"), seq: Number(seq), headers: undefined, data: m.data, published: false, answer: true };
  }
  return { subject: header(m, "Nats-Subject"), seq: Number(seq), headers: h, data: m.data, published: published(h), answer: answer(h) };
}

/**
 * Up to `limit` messages of `stream` on subjects matching `filter`, oldest
 * first, from sequence `start` on (0: the first), with one request; and
 * whether matching messages remain after the last one returned.
 */
export async function batch(
  nc: NatsConnection,
  inboxPrefix: string,
  stream: string,
  filter: string,
  start: number,
  limit: number,
  timeoutMs: number,
): Promise<{ messages: Stored[]; more: boolean }> {
  if (limit < 1) throw new RangeError(`read ${stream}: a batch of ${limit} messages`);
  const req: Record<string, unknown> = { next_by_subj: filter, batch: limit, max_bytes: BATCH_BYTES };
  if (start > 0) req["seq"] = start;
  const inbox = createInbox(inboxPrefix);
  const replies = new Replies(nc, inbox);
  const deadline = Date.now() + timeoutMs;
  const out: Stored[] = [];
  try {
    nc.publish(`$JS.API.DIRECT.GET.${stream}`, JSON.stringify(req), { reply: inbox });
    for (;;) {
      const m = await replies.next(deadline);
      if (!m) {
        throw new InterlockError(
          `read ${stream}: no answer to $JS.API.DIRECT.GET.${stream} in ${timeoutMs} ms: the request may be refused ` +
            `by NATS permissions (the user needs $JS.API.DIRECT.GET.${stream}, the bare subject), or the server is overloaded`,
        );
      }
      // A stored message carries its sequence; only a reply without one is
      // the server's status (a publisher may have stored a Status header).
      const seq = header(m, "Nats-Sequence");
      if (!seq) {
        const code = readHeaders(m)?.code ?? 0;
        if (code === 204) return { messages: out, more: header(m, "Nats-Num-Pending") !== "0" };
        if (code === 404) return { messages: [], more: false };
        if (code === 503) throw new InterlockError(`read ${stream}: no such stream, or it allows no direct gets (status 503)`);
        throw new InterlockError(`read ${stream}: status ${code} ${readHeaders(m)?.description ?? ""}`.trimEnd());
      }
      out.push(storedOf(m, seq));
    }
  } finally {
    replies.sub.unsubscribe();
  }
}

/** The messages {@link batch} reads, going on past batches the server ends early, up to `limit` (undefined: all). */
export async function messages(
  nc: NatsConnection,
  inboxPrefix: string,
  stream: string,
  filter: string,
  start: number,
  limit: number | undefined,
  timeoutMs: number,
): Promise<Stored[]> {
  const out: Stored[] = [];
  while (limit === undefined || out.length < limit) {
    const want = limit === undefined ? 1024 : Math.min(1024, limit - out.length);
    const { messages: got, more } = await batch(nc, inboxPrefix, stream, filter, start, want, timeoutMs);
    out.push(...got);
    if (!more || got.length === 0) break;
    start = got[got.length - 1]!.seq + 1;
  }
  return out;
}

/**
 * The last message of `stream` on `subject` (wildcards allowed), or
 * undefined, with one direct get whose API subject names the subject, so
 * NATS permissions can confine a user's reads to subjects of its own. The
 * reply comes to an inbox under `inboxPrefix` (the connection's); an
 * InterlockError says why there is none. Exported as `lastStored`.
 */
export async function last(
  nc: NatsConnection,
  inboxPrefix: string,
  stream: string,
  subject: string,
  timeoutMs: number,
): Promise<Stored | undefined> {
  const api = `$JS.API.DIRECT.GET.${stream}.${subject}`;
  const inbox = createInbox(inboxPrefix);
  const replies = new Replies(nc, inbox, 1);
  let m: Msg | undefined;
  try {
    nc.publish(api, new Uint8Array(0), { reply: inbox });
    m = await replies.next(Date.now() + timeoutMs);
  } finally {
    replies.sub.unsubscribe();
  }
  if (!m) {
    throw new InterlockError(
      `read ${stream}: no answer to ${api} in ${timeoutMs} ms: the request may be refused by NATS permissions, or the server is overloaded`,
    );
  }
  const seq = header(m, "Nats-Sequence");
  if (!seq) {
    const code = readHeaders(m)?.code ?? 0;
    if (code === 404) return undefined;
    if (code === 503) {
      throw new InterlockError(
        `read ${stream} on ${subject}: no such stream, or it allows no direct gets (run \`interlock provision\` with admin credentials)`,
      );
    }
    throw new InterlockError(`read ${stream} on ${subject}: status ${code} ${readHeaders(m)?.description ?? ""}`.trimEnd());
  }
  return storedOf(m, seq);
}
