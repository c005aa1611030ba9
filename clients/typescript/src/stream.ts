// Following a session's event log over SSE: followSession resumes by itself with Last-Event-ID
// after a dropped connection (each seq once, in order), refreshes an expired stream token, and
// postMessageStream streams the turn that serves a posted message.

import { clientAuth, DshdError, type DshdClient, type Event } from "./client.js";
import { readSSE } from "./sse.js";
import type { components } from "./schema.js";

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

// The stream requests are made through the openapi-fetch client (its base URL, middleware and
// fetch) but typed loosely here: the contract's stream operations are being reshaped, and the
// helpers must compile against either form of openapi.yaml.
type LooseInit = {
  params: { path: { id: string }; query?: Record<string, string | number> };
  headers?: Record<string, string>;
  body?: unknown;
  parseAs: "stream";
  signal: AbortSignal;
};
type LooseResult = { data?: unknown; error?: unknown; response: Response };
type LooseCall = (path: string, init: LooseInit) => Promise<LooseResult>;

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

function field(ev: Event, key: string): unknown {
  const d: unknown = ev.data;
  return typeof d === "object" && d !== null ? (d as Record<string, unknown>)[key] : undefined;
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
  const get = client.GET as unknown as LooseCall;
  try {
    while (!ctl.signal.aborted) {
      const query: Record<string, string | number> = { after: last };
      if (options.types?.length) query["types"] = options.types.join(",");
      if (!auth.apiKey && auth.token !== undefined) {
        if (token === undefined) {
          token = typeof auth.token === "function" ? await auth.token(sessionId) : auth.token;
          tokenFresh = true;
        }
        query["token"] = token;
      }
      const headers: Record<string, string> = { Accept: "text/event-stream", "Cache-Control": "no-cache" };
      if (last >= 0) headers["Last-Event-ID"] = String(last);
      const conn = linked(ctl.signal);
      let res: LooseResult;
      try {
        res = await get("/v1/sessions/{id}/events", {
          params: { path: { id: sessionId }, query },
          headers,
          parseAs: "stream",
          signal: conn.signal,
        });
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
      const body = res.data as ReadableStream<Uint8Array> | null | undefined;
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
  /** Passed to followSession when the stream has to be resumed. */
  follow?: Omit<FollowOptions, "from" | "signal">;
}

/**
 * postMessageStream posts a message (Accept: text/event-stream) and yields the session's events
 * from its splice on until the `turn/end` of the turn that serves it (the server ends the stream
 * there). When the connection drops after the splice arrived, it resumes with followSession and
 * ends at the `turn/end` of the turn whose `user/message` is the posted message (an inject ends
 * with its splice). A drop before the first event is thrown: post again with the same
 * idempotencyKey to get the same answer.
 */
export async function* postMessageStream(
  client: DshdClient,
  sessionId: string,
  body: MessageRequest,
  options: PostStreamOptions = {},
): AsyncGenerator<Event, void, undefined> {
  const ctl = linked(options.signal);
  const post = client.POST as unknown as LooseCall;
  const headers: Record<string, string> = { Accept: "text/event-stream" };
  if (options.idempotencyKey !== undefined) headers["Idempotency-Key"] = options.idempotencyKey;
  let messageId: string | undefined;
  let turn = 0;
  let servingTurn: number | undefined;
  let last = -1;
  // see tracks the events seen and tells whether ev ends the message's stream.
  const see = (ev: Event): boolean => {
    last = ev.seq;
    if (ev.type === "agent/inbox/spliced" && messageId === undefined) {
      const ins = field(ev, "inserted");
      if (Array.isArray(ins) && ins.length > 0) {
        const id = (ins[0] as Record<string, unknown> | undefined)?.["id"];
        if (typeof id === "string") messageId = id;
      }
      return body.mode === "inject";
    }
    if (ev.type === "turn/start") {
      const n = field(ev, "turn");
      if (typeof n === "number") turn = n;
    } else if (ev.type === "user/message" && messageId !== undefined && field(ev, "id") === messageId) {
      servingTurn = servingTurn ?? turn;
    } else if (ev.type === "turn/end") {
      return servingTurn !== undefined && field(ev, "turn") === servingTurn;
    }
    return false;
  };
  const conn = linked(ctl.signal);
  try {
    let res: LooseResult;
    try {
      res = await post("/v1/sessions/{id}/messages", {
        params: { path: { id: sessionId } },
        headers,
        body,
        parseAs: "stream",
        signal: conn.signal,
      });
    } catch (err) {
      if (ctl.signal.aborted) return;
      throw err;
    }
    if (!res.response.ok) throw new DshdError(res.response.status, res.error, retryAfter(res.response));
    const stream = res.data as ReadableStream<Uint8Array> | null | undefined;
    if (!stream) return;
    try {
      for await (const ev of eventsOf(stream, conn, options.follow?.idleMs ?? 45000, () => {})) {
        const end = see(ev);
        yield ev;
        if (end) return;
      }
      return; // the server ended the stream: the turn ended (or the session is gone)
    } catch (err) {
      if (ctl.signal.aborted) return;
      if (last < 0 || err instanceof SyntaxError) throw err;
    }
    for await (const ev of followSession(client, sessionId, { ...options.follow, from: last + 1, signal: ctl.signal })) {
      const end = see(ev);
      yield ev;
      if (end) return;
    }
  } finally {
    ctl.abort();
  }
}
