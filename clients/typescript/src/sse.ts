// A small server-sent events parser over a fetch body (a ReadableStream of bytes), following the
// WHATWG event-stream grammar: lines end with CRLF, LF or CR; a line starting with ':' is a
// comment (dshd's `: heartbeat`); `event`, `data`, `id` and `retry` are the fields; a blank line
// dispatches the message. It runs the same in browsers and Node (fetch, TextDecoder).

/** One dispatched message. */
export interface SSEMessage {
  /** The `event` field; "message" when the frame had none. */
  event: string;
  /** The `data` lines joined with "\n". */
  data: string;
  /** The last event id after this frame (the `id` field of this frame or of an earlier one). */
  id: string;
}

/** What else the reader saw: the `retry` hint (ms), and that bytes came. */
export interface SSEHooks {
  onRetry?: (ms: number) => void;
  /** Called for every piece of the body read (heartbeats included): the connection is alive. */
  onBytes?: () => void;
}

/**
 * SSEParser turns decoded text, fed in arbitrary pieces, into messages. feed returns the messages
 * completed by the piece; a frame cut between two pieces is completed by a later call.
 */
export class SSEParser {
  private buf = "";
  private sawCR = false; // the last piece ended with CR: an LF that starts the next one belongs to it
  private first = true;
  private event = "";
  private data: string[] = [];
  private lastId = "";

  constructor(private readonly hooks: SSEHooks = {}) {}

  feed(text: string): SSEMessage[] {
    if (this.first && text.length > 0) {
      this.first = false;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    if (this.sawCR && text.startsWith("\n")) text = text.slice(1);
    this.sawCR = false;
    this.buf += text;
    const out: SSEMessage[] = [];
    let start = 0;
    const buf = this.buf;
    // The next LF and CR at or after start (-1: none); dshd's frames have no CR, so its search
    // runs once a piece.
    let lf = buf.indexOf("\n");
    let cr = buf.indexOf("\r");
    for (;;) {
      if (lf >= 0 && lf < start) lf = buf.indexOf("\n", start);
      if (cr >= 0 && cr < start) cr = buf.indexOf("\r", start);
      const end = lf < 0 ? cr : cr < 0 ? lf : Math.min(lf, cr);
      if (end < 0) break;
      const line = buf.slice(start, end);
      if (end === cr) {
        if (end + 1 < buf.length) {
          start = lf === end + 1 ? end + 2 : end + 1;
        } else {
          start = end + 1;
          this.sawCR = true;
        }
      } else {
        start = end + 1;
      }
      const msg = this.line(line);
      if (msg) out.push(msg);
    }
    this.buf = buf.slice(start);
    return out;
  }

  private line(line: string): SSEMessage | undefined {
    if (line === "") {
      const data = this.data;
      const event = this.event;
      this.data = [];
      this.event = "";
      if (data.length === 0) return undefined;
      return { event: event || "message", data: data.join("\n"), id: this.lastId };
    }
    if (line.startsWith(":")) return undefined;
    const colon = line.indexOf(":");
    let field = line;
    let value = "";
    if (colon >= 0) {
      field = line.slice(0, colon);
      value = line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
    }
    switch (field) {
      case "event":
        this.event = value;
        break;
      case "data":
        this.data.push(value);
        break;
      case "id":
        if (!value.includes("\0")) this.lastId = value;
        break;
      case "retry":
        if (/^[0-9]+$/.test(value)) this.hooks.onRetry?.(Number(value));
        break;
    }
    return undefined;
  }
}

/**
 * readSSE yields the messages of an event-stream body until it ends. A read error (a dropped
 * connection) is thrown to the caller; a frame left incomplete at the end is not dispatched, as
 * the standard says.
 */
export async function* readSSE(body: ReadableStream<Uint8Array>, hooks: SSEHooks = {}): AsyncGenerator<SSEMessage> {
  const reader = body.getReader();
  const decoder = new TextDecoder("utf-8");
  const parser = new SSEParser(hooks);
  let done = false;
  try {
    for (;;) {
      const r = await reader.read();
      if (r.done) {
        done = true;
        for (const m of parser.feed(decoder.decode())) yield m;
        return;
      }
      hooks.onBytes?.();
      for (const m of parser.feed(decoder.decode(r.value, { stream: true }))) yield m;
    }
  } finally {
    if (!done) {
      try {
        await reader.cancel();
      } catch {
        // the stream failed already
      }
    }
    reader.releaseLock();
  }
}
