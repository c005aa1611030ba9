// Unit tests of the SSE parser: dshd's frames, split at every byte, and the standard's corners.

import assert from "node:assert/strict";
import { test } from "node:test";
import { readSSE, SSEParser, type SSEMessage } from "../src/sse.js";

const frames =
  ": heartbeat\n\n" +
  'id: 0\nevent: turn/start\ndata: {"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}\n\n' +
  "retry: 750\n\n" +
  'id: 1\nevent: assistant/chunk\ndata: {"type":"assistant/chunk","seq":1,"time":2,"data":{"text":"h\\u00e9 ✓"}}\n\n';

const want: SSEMessage[] = [
  { event: "turn/start", id: "0", data: '{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}' },
  { event: "assistant/chunk", id: "1", data: '{"type":"assistant/chunk","seq":1,"time":2,"data":{"text":"h\\u00e9 ✓"}}' },
];

function parseAll(pieces: string[]): { msgs: SSEMessage[]; retries: number[] } {
  const retries: number[] = [];
  const p = new SSEParser({ onRetry: (ms) => retries.push(ms) });
  const msgs = pieces.flatMap((s) => p.feed(s));
  return { msgs, retries };
}

function bodyOf(chunks: Uint8Array[], fail?: Error): ReadableStream<Uint8Array> {
  let i = 0;
  return new ReadableStream<Uint8Array>({
    pull(c) {
      const chunk = chunks[i++];
      if (chunk !== undefined) c.enqueue(chunk);
      else if (fail) c.error(fail);
      else c.close();
    },
  });
}

async function collect(body: ReadableStream<Uint8Array>): Promise<SSEMessage[]> {
  const out: SSEMessage[] = [];
  for await (const m of readSSE(body)) out.push(m);
  return out;
}

test("dshd's frames in one piece", () => {
  const { msgs, retries } = parseAll([frames]);
  assert.deepEqual(msgs, want);
  assert.deepEqual(retries, [750]);
});

test("split at every position, with LF, CRLF and CR line ends", () => {
  for (const eol of ["\n", "\r\n", "\r"]) {
    const text = frames.replace(/\n/g, eol);
    for (let i = 0; i <= text.length; i++) {
      const { msgs } = parseAll([text.slice(0, i), text.slice(i)]);
      assert.deepEqual(msgs, want, `eol ${JSON.stringify(eol)} split at ${i}`);
    }
  }
});

test("bytes split inside a UTF-8 sequence", async () => {
  const bytes = new TextEncoder().encode(frames);
  for (let i = 0; i <= bytes.length; i += 1) {
    const got = await collect(bodyOf([bytes.slice(0, i), bytes.slice(i)]));
    assert.deepEqual(got, want, `split at byte ${i}`);
  }
  const oneByOne = await collect(bodyOf(Array.from(bytes, (b) => Uint8Array.of(b))));
  assert.deepEqual(oneByOne, want);
});

test("the standard's corners", () => {
  const { msgs } = parseAll([
    "\uFEFFdata: a\ndata:b\ndata\n\n" + // BOM; no space after the colon; a field without a colon
      "event: x\n\n" + // no data: not dispatched, and its event name does not leak
      "id: 7\n: comment\ndata: c\n\n" +
      "id: bad\0id\ndata: d\n\n" + // an id with NUL is ignored
      "unknown: field\ndata: e\n\n" +
      "retry: soon\ndata: f", // an incomplete frame is not dispatched
  ]);
  assert.deepEqual(msgs, [
    { event: "message", data: "a\nb\n", id: "" },
    { event: "message", data: "c", id: "7" },
    { event: "message", data: "d", id: "7" },
    { event: "message", data: "e", id: "7" },
  ]);
});

test("a body that fails is thrown after the frames before it", async () => {
  const bytes = new TextEncoder().encode(frames + 'id: 2\nevent: turn/end\ndata: {"ty');
  const got: SSEMessage[] = [];
  await assert.rejects(async () => {
    for await (const m of readSSE(bodyOf([bytes], new Error("terminated")))) got.push(m);
  }, /terminated/);
  assert.deepEqual(got, want);
});

test("leaving the loop cancels the body", async () => {
  let cancelled = false;
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      c.enqueue(new TextEncoder().encode(frames));
    },
    cancel() {
      cancelled = true;
    },
  });
  for await (const m of readSSE(body)) {
    assert.equal(m.id, "0");
    break;
  }
  assert.ok(cancelled);
});
