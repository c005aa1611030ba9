// createClient: the openapi-fetch client of dshd's API, typed by the generated schema
// (src/schema.ts, `npm run generate` from the top-level openapi.yaml), with its authentication.

import createFetchClient, { type Client, type Middleware } from "openapi-fetch";
import type { components, paths } from "./schema.js";

/** A dshd API client: the openapi-fetch client over dshd's paths. */
export type DshdClient = Client<paths>;

/** One log event, as the contract types it (a discriminated union on `type` once openapi.yaml makes it one). */
export type Event = components["schemas"]["Event"];

/** An event's kind. */
export type EventType = Event["type"];

/**
 * The event of kind T: its typed branch of Event when the contract has one, else Event with that
 * `type`.
 */
export type EventOf<T extends string> = [Extract<Event, { type: T }>] extends [never]
  ? Event & { type: T }
  : Extract<Event, { type: T }>;

/**
 * isEvent narrows ev to the kind type. Prefer it to `ev.type === type`: the contract's open branch
 * (kinds this client does not know, typed `type: string`) keeps a plain comparison from narrowing.
 */
export function isEvent<T extends string>(ev: Event, type: T): ev is EventOf<T> {
  return ev.type === type;
}

/** An RFC 9457 problem document, as dshd answers errors. */
export type Problem = components["schemas"]["Problem"];

/**
 * Where a stream token comes from: a token, or a function that fetches a fresh one for a session
 * (from your backend, which holds the API key and calls POST /v1/sessions/{id}/stream-tokens). A
 * function is called again when a reconnect finds the token expired.
 */
export type TokenSource = string | ((sessionId: string) => string | Promise<string>);

export interface ClientOptions {
  /** The server, e.g. "https://dshd.example.com" (no /v1). */
  baseUrl: string;
  /** A tenant API key: sent as `Authorization: Bearer` on every request. Never put one in a page. */
  apiKey?: string;
  /** Instead of an API key (browsers): a stream token, which opens a session's event stream only. */
  token?: TokenSource;
  /** A fetch to use instead of globalThis.fetch. */
  fetch?: typeof globalThis.fetch;
}

/** The authentication of a client, read by the stream helpers. */
export interface ClientAuth {
  apiKey?: string;
  token?: TokenSource;
}

const auths = new WeakMap<object, ClientAuth>();

/** clientAuth returns how client authenticates (set by createClient). */
export function clientAuth(client: DshdClient): ClientAuth {
  return auths.get(client) ?? {};
}

/** createClient returns an openapi-fetch client of dshd with an auth middleware. */
export function createClient(options: ClientOptions): DshdClient {
  if (!options.apiKey && !options.token) {
    throw new TypeError("createClient: apiKey or token is required");
  }
  if (options.apiKey && options.token) {
    throw new TypeError("createClient: give apiKey or token, not both");
  }
  const client = createFetchClient<paths>({
    baseUrl: options.baseUrl.replace(/\/+$/, ""),
    ...(options.fetch ? { fetch: options.fetch } : {}),
  });
  const apiKey = options.apiKey;
  if (apiKey) {
    const auth: Middleware = {
      onRequest({ request }) {
        if (!request.headers.has("Authorization")) {
          request.headers.set("Authorization", `Bearer ${apiKey}`);
        }
        return request;
      },
    };
    client.use(auth);
  }
  auths.set(client, { ...(apiKey ? { apiKey } : {}), ...(options.token ? { token: options.token } : {}) });
  return client;
}

/** DshdError is a failed request: its HTTP status and problem document. */
export class DshdError extends Error {
  readonly status: number;
  readonly code: string | undefined;
  readonly problem: unknown;
  readonly retryAfter: number | undefined;

  constructor(status: number, problem: unknown, retryAfter?: number) {
    const p = (typeof problem === "object" && problem !== null ? problem : {}) as Record<string, unknown>;
    const code = typeof p["code"] === "string" ? p["code"] : undefined;
    const detail = typeof p["detail"] === "string" ? p["detail"] : typeof p["title"] === "string" ? p["title"] : "";
    super(`dshd: ${status}${code ? " " + code : ""}${detail ? ": " + detail : ""}`);
    this.name = "DshdError";
    this.status = status;
    this.code = code;
    this.problem = problem;
    this.retryAfter = retryAfter;
  }
}
