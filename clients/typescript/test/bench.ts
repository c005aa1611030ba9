// npm run bench: the SSE parser's throughput on dshd-like frames (assistant/chunk events of about
// 200 bytes), read from a body in 16 KiB pieces, with and without JSON.parse of each event.

import { readSSE } from "../src/sse.js";

const frame = (seq: number) =>
  `id: ${seq}\nevent: assistant/chunk\ndata: {"type":"assistant/chunk","seq":${seq},"time":1796136933207,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","text":"some words of the model's answer, streamed"}}}\n\n`;
const n = 100_000;
const text = Array.from({ length: n }, (_, i) => frame(i)).join("") + ": heartbeat\n\n".repeat(100);
const bytes = new TextEncoder().encode(text);
const piece = 16 * 1024;

function body(): ReadableStream<Uint8Array> {
  let off = 0;
  return new ReadableStream<Uint8Array>({
    pull(c) {
      if (off >= bytes.length) return c.close();
      c.enqueue(bytes.subarray(off, off + piece));
      off += piece;
    },
  });
}

async function run(parse: boolean): Promise<number> {
  const t0 = performance.now();
  let count = 0;
  for await (const m of readSSE(body())) {
    if (parse) JSON.parse(m.data);
    count++;
  }
  if (count !== n) throw new Error(`parsed ${count} events, want ${n}`);
  return performance.now() - t0;
}

for (const parse of [false, true]) {
  await run(parse); // warm up
  const times: number[] = [];
  for (let i = 0; i < 5; i++) times.push(await run(parse));
  times.sort((a, b) => a - b);
  const ms = times[2] ?? 0;
  console.log(
    `${parse ? "readSSE + JSON.parse" : "readSSE"}: ${n} events, ${(bytes.length / 1e6).toFixed(1)} MB in ${ms.toFixed(0)} ms (median of 5): ` +
      `${((bytes.length / 1e6) / (ms / 1000)).toFixed(0)} MB/s, ${Math.round(n / (ms / 1000))} events/s`,
  );
}
