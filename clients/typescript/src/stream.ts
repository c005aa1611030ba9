// Following a session's event log over SSE: followSession resumes by itself with Last-Event-ID
// after a dropped connection (each seq once, in order), refreshes an expired stream token, and
// postMessageStream streams a posted message until the event its stream ends at.

import { clientAuth, DshdError, isEvent, type DshdClient, type Event } from "./client.js";
import { readSSE } from "./sse.js";
import type { components, operations } from "./schema.js";

export type MessageRequest = components["schemas"]["MessageRequest"];

export interface FollowOptions {
  /** The seq of the first event wanted (default 0: the whole log). */
  from?: number;
  /** Ends the stream: the iteration returns. */
  signal?: AbortSignal;
  /** Only these kinds (the server filters; seqs then have gaps). */
  types?: string[];
  /** The first reconnect delay in ms (default 250), doubled after each failed attempt up to maxRetryMs. */
  retryMs?: number;
  /** The longest reconnect delay in ms (default 5000). */
  maxRetryMs?: number;
  /**
   * A connection that brings no byte for this long (ms) is given up and reopened (default 45000:
   * three of dshd's 15 s heartbeats).
   */
  idleMs?: number;
  /** Called each time a stream opens, with the seq it resumes after (-1 for the start). */
  onOpen?: (after: number) => void;
}

function retryAfter(res: Response): number | undefined {
  const v = res.headers.get("Retry-After");
  if (v === null || !/^[0-9]+$/.test(v.trim())) return undefined;
  return Number(v.trim());
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

/**
 * linked returns a controller that aborts when signal does; aborting it (at the latest when its
 * work is over) removes its listener from signal, so a long-lived signal collects none.
 */
function linked(signal: AbortSignal | undefined): AbortController {
  const ctl = new AbortController();
  if (signal) {
    if (signal.aborted) {
      ctl.abort(signal.reason);
    } else {
      const up = () => ctl.abort(signal.reason);
      signal.addEventListener("abort", up, { once: true });
      ctl.signal.addEventListener("abort", () => signal.removeEventListener("abort", up), { once: true });
    }
  }
  return ctl;
}

function parseEvent(data: string): Event {
  const ev = JSON.parse(data) as Event;
  if (typeof ev !== "object" || ev === null || typeof ev.seq !== "number" || typeof ev.type !== "string") {
    throw new Error("dshd: an SSE frame that is not an event: " + data.slice(0, 200));
  }
  return ev;
}

/**
 * eventsOf yields the events of one open stream body, stopping (by abort) when no byte came for
 * idleMs. A dropped connection is thrown.
 */
async function* eventsOf(
  body: ReadableStream<Uint8Array>,
  conn: AbortController,
  idleMs: number,
  onRetry: (ms: number) => void,
): AsyncGenerator<Event> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const arm = () => {
    clearTimeout(timer);
    timer = setTimeout(() => conn.abort(new Error("dshd: the stream went silent")), idleMs);
  };
  arm();
  try {
    for await (const m of readSSE(body, { onRetry, onBytes: arm })) {
      yield parseEvent(m.data);
    }
  } finally {
    clearTimeout(timer);
  }
}

type StreamQuery = NonNullable<operations["streamSessionEvents"]["parameters"]["query"]>;

/** openStream opens the session's stream (streamSessionEvents) after seq last. */
function openStream(client: DshdClient, sessionId: string, query: StreamQuery, last: number, signal: AbortSignal) {
  return client.GET("/v1/sessions/{id}/events/stream", {
    params: {
      path: { id: sessionId },
      query,
      ...(last >= 0 ? { header: { "Last-Event-ID": String(last) } } : {}),
    },
    headers: { Accept: "text/event-stream", "Cache-Control": "no-cache" },
    parseAs: "stream",
    signal,
  });
}

/**
 * followSession yields the events of a session from `from` on, then live, as typed values, until
 * the signal aborts, the loop is left, or the session is deleted (the server answers 404). A
 * dropped or silent connection, a server shutting down, 429, 5xx and network errors are retried
 * with Last-Event-ID, so every event comes once, in order. With a stream-token client whose token
 * is a function, a 401 on reconnect fetches a fresh token once. Other errors are thrown
 * (DshdError).
 */
export async function* followSession(
  client: DshdClient,
  sessionId: string,
  options: FollowOptions = {},
): AsyncGenerator<Event, void, undefined> {
  const auth = clientAuth(client);
  const ctl = linked(options.signal);
  const base = options.retryMs ?? 250;
  const maxDelay = options.maxRetryMs ?? 5000;
  const idleMs = options.idleMs ?? 45000;
  let last = Math.max(0, options.from ?? 0) - 1;
  let delay = base;
  let hint: number | undefined;
  let token: string | undefined;
  let tokenFresh = false;
  try {
    while (!ctl.signal.aborted) {
      const query: StreamQuery = { after: last };
      if (options.types?.length) query.types = options.types.join(",");
      if (!auth.apiKey && auth.token !== undefined) {
        if (token === undefined) {
          token = typeof auth.token === "function" ? await auth.token(sessionId) : auth.token;
          tokenFresh = true;
        }
        query.token = token;
      }
      const conn = linked(ctl.signal);
      let res: Awaited<ReturnType<typeof openStream>>;
      try {
        res = await openStream(client, sessionId, query, last, conn.signal);
      } catch {
        conn.abort();
        if (ctl.signal.aborted) return;
        await sleep(delay, ctl.signal); // a network error: the server may be restarting
        delay = Math.min(delay * 2, maxDelay);
        continue;
      }
      if (!res.response.ok) {
        conn.abort();
        const status = res.response.status;
        if (status === 404) return; // the session was deleted (or never was)
        if (status === 401 && typeof auth.token === "function" && !tokenFresh) {
          token = undefined; // expired: fetch a fresh one and try again at once
          continue;
        }
        if (status === 429 || status >= 500) {
          const ra = retryAfter(res.response);
          await sleep(ra !== undefined ? ra * 1000 : delay, ctl.signal);
          delay = Math.min(delay * 2, maxDelay);
          continue;
        }
        throw new DshdError(status, res.error, retryAfter(res.response));
      }
      tokenFresh = false;
      options.onOpen?.(last);
      const body = res.data;
      if (body) {
        try {
          for await (const ev of eventsOf(body, conn, idleMs, (ms) => (hint = ms))) {
            if (ev.seq <= last) continue; // never twice
            last = ev.seq;
            delay = base;
            yield ev;
          }
        } catch (err) {
          if (ctl.signal.aborted) return;
          if (err instanceof SyntaxError) throw err; // a frame that is not JSON: not ours to retry
          // dropped: reconnect below
        }
      }
      conn.abort();
      await sleep(hint ?? delay, ctl.signal);
      hint = undefined;
      delay = Math.min(delay * 2, maxDelay);
    }
  } finally {
    ctl.abort();
  }
}

export interface PostStreamOptions {
  signal?: AbortSignal;
  /** Makes a retry of the post safe (Idempotency-Key). */
  idempotencyKey?: string;
  /** Passed to followSession when the stream has to be resumed (not `types`: the end is told from every kind). */
  follow?: Omit<FollowOptions, "from" | "signal" | "types">;
}

type Splice = components["schemas"]["eventlog.InboxSpliced"];

/**
 * MessageWatch tells where a message's stream ends, by the server's rule (api/turns.go
 * turnWatch): at the `turn/end` of the turn that entered the message as a `user/message`; at the
 * `turn/end` of a turn that claimed it from the inbox but ended before entering it (it could not
 * take a step: turn/end of kind error); at the splice of a cancel that removed it from the inbox
 * before a turn took it; right after its own splice for an inject. It follows the message's place
 * in the inbox through every splice, to tell its claim from other messages'.
 */
class MessageWatch {
  private messageId: string | undefined;
  private current = 0; // the open turn, from turn/start and step/start
  private serving = 0; // the turn that entered the message, 0 before
  private target: string | undefined; // the inbox list that holds it, once its splice is seen
  private pos = 0; // its index in that list
  private claimed = false; // a turn took it out of the inbox

  constructor(private readonly inject: boolean) {}

  /** observe folds ev; true when ev is the last event of the message's stream. */
  observe(ev: Event): boolean {
    if (isEvent(ev, "turn/start") || isEvent(ev, "step/start") || isEvent(ev, "turn/end")) {
      const n = ev.data?.turn;
      if (typeof n !== "number") return false;
      if (!isEvent(ev, "turn/end")) {
        this.current = n;
        return false;
      }
      if (this.serving !== 0) return n === this.serving;
      return this.claimed; // claimed, never entered: this turn discarded it
    }
    if (isEvent(ev, "user/message")) {
      if (this.messageId !== undefined && ev.data?.id === this.messageId && this.serving === 0) {
        this.serving = this.current;
      }
      return false;
    }
    if (isEvent(ev, "agent/inbox/spliced") && ev.data) return this.splice(ev.data);
    return false;
  }

  private splice(s: Splice): boolean {
    if (this.target === undefined) {
      // The stream starts at the message's own splice, which inserts the message alone.
      const m = this.messageId === undefined ? s.inserted[0] : s.inserted.find((x) => x.id === this.messageId);
      if (m !== undefined) {
        this.messageId = m.id;
        this.target = s.target;
        this.pos = s.start + s.inserted.indexOf(m);
        return this.inject;
      }
      return s.outcome === "canceled" && this.serving === 0;
    }
    if (this.claimed || s.target !== this.target) return false;
    const removed = s.removedCount ?? 0;
    if (this.pos < s.start) return false;
    if (this.pos < s.start + removed) {
      if (s.outcome === "canceled") return true; // cleared by a cancel before a turn took it
      this.claimed = true;
      return false;
    }
    this.pos += s.inserted.length - removed;
    return false;
  }
}

/**
 * postMessageStream posts a message (postMessageStream, POST /v1/sessions/{id}/messages/stream)
 * and yields the session's events from its splice on until the end of the message's stream: the
 * `turn/end` of the turn that serves it, the `turn/end` of a turn that took it from the inbox but
 * could not take a step (kind `error`), the splice of a cancel that cleared it from the inbox
 * before a turn took it, or, for an inject, its splice alone. The server ends the stream there;
 * when the connection drops (or closes) before, it resumes with followSession and ends at the
 * same event by the same rule, or when the session is deleted. A drop before the first event is
 * thrown: post again with the same idempotencyKey to get the same answer.
 */
export async function* postMessageStream(
  client: DshdClient,
  sessionId: string,
  body: MessageRequest,
  options: PostStreamOptions = {},
): AsyncGenerator<Event, void, undefined> {
  const ctl = linked(options.signal);
  const watch = new MessageWatch(body.mode === "inject");
  let last = -1;
  const conn = linked(ctl.signal);
  try {
    let res: Awaited<ReturnType<typeof postStream>>;
    try {
      res = await postStream(client, sessionId, body, options.idempotencyKey, conn.signal);
    } catch (err) {
      if (ctl.signal.aborted) return;
      throw err;
    }
    if (!res.response.ok) throw new DshdError(res.response.status, res.error, retryAfter(res.response));
    const stream = res.data;
    if (!stream) return;
    try {
      for await (const ev of eventsOf(stream, conn, options.follow?.idleMs ?? 45000, () => {})) {
        last = ev.seq;
        const end = watch.observe(ev);
        yield ev;
        if (end) return;
      }
      // Closed before the message's end: a server shutting down, a proxy, or a deleted session
      // (followSession then ends at once).
    } catch (err) {
      if (ctl.signal.aborted) return;
      if (err instanceof SyntaxError) throw err;
    }
    if (last < 0) {
      if (ctl.signal.aborted) return;
      throw new Error("dshd: the message stream ended before its first event; post again with the same idempotencyKey");
    }
    conn.abort();
    for await (const ev of followSession(client, sessionId, { ...options.follow, from: last + 1, signal: ctl.signal })) {
      const end = watch.observe(ev);
      yield ev;
      if (end) return;
    }
  } finally {
    ctl.abort();
  }
}

/** postStream posts the message and opens its stream (postMessageStream). */
function postStream(
  client: DshdClient,
  sessionId: string,
  body: MessageRequest,
  idempotencyKey: string | undefined,
  signal: AbortSignal,
) {
  return client.POST("/v1/sessions/{id}/messages/stream", {
    params: {
      path: { id: sessionId },
      ...(idempotencyKey !== undefined ? { header: { "Idempotency-Key": idempotencyKey } } : {}),
    },
    headers: { Accept: "text/event-stream" },
    body,
    parseAs: "stream",
    signal,
  });
}
