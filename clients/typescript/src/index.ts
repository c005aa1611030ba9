export {
  createClient,
  clientAuth,
  DshdError,
  isEvent,
  type ClientOptions,
  type ClientAuth,
  type DshdClient,
  type Event,
  type EventOf,
  type EventType,
  type Problem,
  type TokenSource,
} from "./client.js";
export { followSession, postMessageStream, type FollowOptions, type PostStreamOptions, type MessageRequest } from "./stream.js";
export { readSSE, SSEParser, type SSEMessage, type SSEHooks } from "./sse.js";
export type { components, paths } from "./schema.js";
