// End-to-end tests of the client against a real dshd (internal/e2e TestTSClient starts one over
// PostgreSQL and cmd/mockllm, with a proxy in front whose connections it cuts on POST $DSHD_CUT).
// Without DSHD_URL they skip.

import assert from "node:assert/strict";
import { getEventListeners } from "node:events";
import { test } from "node:test";
import { createClient, DshdError, followSession, isEvent, postMessageStream, type DshdClient, type Event } from "../src/index.js";

const env = process.env;
const viaProxy = env["DSHD_URL"] ?? "";
const direct = env["DSHD_API_DIRECT"] ?? viaProxy;
const apiKey = env["DSHD_API_KEY"] ?? "";
const mockURL = env["DSHD_MOCK_URL"] ?? "";
const cutURL = env["DSHD_CUT"] ?? "";
const tokenTTLms = Number(env["DSHD_STREAM_TOKEN_TTL_MS"] ?? "0");
const skip = viaProxy === "" ? "DSHD_URL is not set (internal/e2e TestTSClient runs these)" : false;

/** cut closes every connection through the proxy, as a network failure would. */
async function cut(): Promise<number> {
  const res = await fetch(cutURL, { method: "POST" });
  return parseInt(await res.text(), 10);
}

function field(ev: Event, key: string): unknown {
  const d: unknown = ev.data;
  return typeof d === "object" && d !== null ? (d as Record<string, unknown>)[key] : undefined;
}

async function newPreset(api: DshdClient, name: string, extra: Record<string, unknown> = {}): Promise<string> {
  const { data, error } = await api.POST("/v1/presets", {
    body: { name, model: { provider: "openai", model: "mock", baseUrl: mockURL }, ...extra },
  });
  assert.ok(data, `create preset: ${JSON.stringify(error)}`);
  return data.id;
}

async function newSession(api: DshdClient, presetId: string): Promise<string> {
  const { data, error } = await api.POST("/v1/sessions", { body: { presetId } });
  assert.ok(data, `create session: ${JSON.stringify(error)}`);
  return data.id;
}

/** logOf reads a session's whole log as JSON pages. */
async function logOf(api: DshdClient, id: string): Promise<Event[]> {
  const out: Event[] = [];
  let after = -1;
  for (;;) {
    const { data, error } = await api.GET("/v1/sessions/{id}/events", {
      params: { path: { id }, query: { after, limit: 1000 } },
    });
    assert.ok(data !== undefined && typeof data === "object", `events: ${JSON.stringify(error)}`);
    if (data.events.length === 0) return out;
    out.push(...data.events);
    after = data.nextAfter;
  }
}

function assertWhole(evs: Event[], from = 0): void {
  evs.forEach((ev, i) => assert.equal(ev.seq, from + i, `event ${i} has seq ${ev.seq}: a gap or a duplicate`));
}

/** endReason is the reason of the last event, a turn/end. */
function endReason(evs: Event[]): unknown {
  const last = evs.at(-1);
  assert.equal(last?.type, "turn/end");
  return last && field(last, "reason");
}

function kinds(evs: Event[], type: string): Event[] {
  return evs.filter((ev) => ev.type === type);
}

/**
 * dropAfterFirstEvent is a fetch whose message streams (POST .../messages/stream) break right
 * after their first event, as a network failure would, however soon the server ends them.
 */
function dropAfterFirstEvent(): typeof fetch {
  return async (input, init) => {
    const res = await fetch(input, init);
    const url = input instanceof Request ? input.url : String(input);
    if (!url.endsWith("/messages/stream") || !res.ok || !res.body) return res;
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let text = "";
    let sent = false;
    const body = new ReadableStream<Uint8Array>({
      async pull(ctl) {
        // The error comes on the pull after the event's: an error drops what is queued.
        if (sent) return ctl.error(new Error("dropped"));
        for (;;) {
          const { done, value } = await reader.read();
          if (done) return ctl.error(new Error("the stream ended before its first event"));
          text += dec.decode(value, { stream: true });
          const m = /(^|\n)data:[^\n]*\n\n/.exec(text);
          if (m) {
            ctl.enqueue(new TextEncoder().encode(text.slice(0, m.index + m[0].length)));
            await reader.cancel();
            sent = true;
            return;
          }
        }
      },
    });
    return new Response(body, { status: res.status, headers: res.headers });
  };
}

test("the TypeScript client against dshd", { skip }, async (t) => {
  const api = createClient({ baseUrl: direct, apiKey });
  const proxied = createClient({ baseUrl: viaProxy, apiKey });
  const presetId = await newPreset(api, "ts-client");

  await t.test("a turn with tool calls streams until its turn/end", async () => {
    const s = await newSession(api, presetId);
    const evs: Event[] = [];
    for await (const ev of postMessageStream(api, s, { content: "tools:2" })) evs.push(ev);
    assert.equal(evs[0]?.type, "agent/inbox/spliced");
    const end = evs.at(-1);
    assert.equal(end?.type, "turn/end");
    assert.deepEqual(end && field(end, "reason"), { kind: "completed" });
    assert.equal(kinds(evs, "tool/call").length, 2);
    assert.equal(kinds(evs, "tool/result").length, 2);
    assertWhole(evs);
    assert.deepEqual(evs, await logOf(api, s));
  });

  /**
   * answerAfterCut cuts every connection through the proxy, then allows the asked call. What the
   * turn writes after the answer can only come over a new connection, however far the server runs
   * ahead of the client: every cut is followed by a reconnect.
   */
  async function answerAfterCut(s: string, ev: Event): Promise<void> {
    assert.ok((await cut()) >= 1, "the proxy had no connection to cut");
    const approvalId = String(field(ev, "id"));
    const { data, error } = await api.POST("/v1/sessions/{id}/approvals/{approvalId}", {
      params: { path: { id: s, approvalId } },
      body: { outcome: "allowed-once" },
    });
    assert.ok(data, `answer: ${JSON.stringify(error)}`);
  }
  const asking = await newPreset(api, "ts-ask-resume", { approval: { policy: "ask", ask: ["echo"], timeoutMs: 60000 } });

  await t.test("followSession resumes after dropped connections with no duplicate and no gap", async () => {
    const s = await newSession(api, asking);
    const evs: Event[] = [];
    const opens: number[] = [];
    const posted = api.POST("/v1/sessions/{id}/messages", {
      params: { path: { id: s } },
      body: { content: "tool:echo steps:3 chunkdelay:5" },
    });
    let cuts = 0;
    for await (const ev of followSession(proxied, s, { onOpen: (after) => opens.push(after), retryMs: 50 })) {
      evs.push(ev);
      // Each of the three steps asks; its approval is answered after a cut.
      if (ev.type === "approval/asked") {
        assert.ok(opens.length > cuts, "an approval was asked on a connection already cut");
        cuts++;
        await answerAfterCut(s, ev);
      }
      if (ev.type === "turn/end") break;
    }
    assert.ok((await posted).data);
    assert.equal(cuts, 3);
    assert.ok(opens.length > cuts, `opened ${opens.length} times for ${cuts} cuts`);
    assert.equal(opens[0], -1);
    opens.slice(1).forEach((after) => assert.ok(after >= 0, `a reconnect from ${after}`));
    assert.deepEqual(endReason(evs), { kind: "completed" });
    assertWhole(evs);
    assert.deepEqual(evs, await logOf(api, s));

    // from: a later start, and the stream ends when the loop is left.
    const tail: Event[] = [];
    for await (const ev of followSession(proxied, s, { from: 5 })) {
      tail.push(ev);
      if (ev.seq === evs.length - 1) break;
    }
    assert.deepEqual(tail, evs.slice(5));
  });

  await t.test("postMessageStream resumes a dropped turn stream", async () => {
    const s = await newSession(api, asking);
    const evs: Event[] = [];
    let cuts = 0;
    let conns = 1; // the post's own stream, then followSession's
    const follow = { retryMs: 50, onOpen: () => void conns++ };
    for await (const ev of postMessageStream(proxied, s, { content: "tool:echo steps:2 chunkdelay:5" }, { follow })) {
      evs.push(ev);
      if (ev.type === "approval/asked") {
        assert.ok(conns > cuts, "an approval was asked on a connection already cut");
        cuts++;
        await answerAfterCut(s, ev);
      }
    }
    assert.equal(cuts, 2);
    assert.ok(conns > cuts, `${conns} connections for ${cuts} cuts`);
    assert.equal(evs.at(-1)?.type, "turn/end");
    assert.deepEqual(endReason(evs), { kind: "completed" });
    assertWhole(evs);
    assert.deepEqual(evs, await logOf(api, s));
  });

  await t.test("a resumed message stream ends when a cancel clears the message from the inbox", async () => {
    const s = await newSession(api, presetId);
    const running = await api.POST("/v1/sessions/{id}/messages", {
      params: { path: { id: s } },
      body: { content: 'tool:sleep args:{"ms":60000}' },
    });
    assert.ok(running.data);
    for await (const ev of followSession(api, s)) if (isEvent(ev, "tool/call")) break;
    // The message waits in the inbox behind the sleeping turn: its stream is open when it is cut.
    const evs: Event[] = [];
    let opens = 0;
    for await (const ev of postMessageStream(proxied, s, { content: "text" }, { follow: { retryMs: 50, onOpen: () => void opens++ } })) {
      evs.push(ev);
      if (evs.length === 1) {
        assert.ok((await cut()) >= 1, "the proxy had no connection to cut");
        const { data, error } = await api.POST("/v1/sessions/{id}/cancel", { params: { path: { id: s } }, body: {} });
        assert.ok(data, `cancel: ${JSON.stringify(error)}`);
        assert.equal(data.cancelled, true);
      }
    }
    assert.ok(opens >= 1, "the stream was not resumed");
    const end = evs.at(-1);
    assert.ok(end && isEvent(end, "agent/inbox/spliced"), `ended with ${end?.type}`);
    assert.equal(end.data?.outcome, "canceled");
    assert.ok((end.data?.removedCount ?? 0) >= 1);
    assert.equal(kinds(evs, "user/message").length, 0);
    assertWhole(evs, evs[0]?.seq ?? 0);
    const log = await logOf(api, s);
    assert.deepEqual(evs, log.slice(evs[0]?.seq ?? 0, (end.seq ?? 0) + 1));
  });

  await t.test("a resumed message stream ends with a turn that fails before entering the message", async () => {
    // toolOrder names an unknown tool: the prompt does not assemble, so the turn that claims the
    // message ends with turn/end {kind: error} and never enters it as a user/message.
    const failing = await newPreset(api, "ts-unassembled", { tools: { toolOrder: ["no_such_tool", "<unlisted-tools>"] } });
    const s = await newSession(api, failing);
    const dropping = createClient({ baseUrl: direct, apiKey, fetch: dropAfterFirstEvent() });
    const evs: Event[] = [];
    let opens = 0;
    for await (const ev of postMessageStream(dropping, s, { content: "hello" }, { follow: { retryMs: 50, onOpen: () => void opens++ } })) {
      evs.push(ev);
    }
    assert.ok(opens >= 1, "the stream was not resumed");
    assert.equal(evs[0]?.type, "agent/inbox/spliced");
    const end = evs.at(-1);
    assert.ok(end && isEvent(end, "turn/end"), `ended with ${end?.type}`);
    assert.equal(end.data?.reason.kind, "error");
    assert.equal(kinds(evs, "user/message").length, 0);
    assertWhole(evs);
    assert.deepEqual(evs, await logOf(api, s));
  });

  await t.test("a stream token is refreshed when a reconnect finds it expired", { skip: tokenTTLms <= 0 }, async () => {
    const s = await newSession(api, presetId);
    for await (const ev of postMessageStream(api, s, { content: "text" })) void ev;
    const minted: string[] = [];
    const browser = createClient({
      baseUrl: viaProxy,
      token: async (sessionId) => {
        const { data, error } = await api.POST("/v1/sessions/{id}/stream-tokens", { params: { path: { id: sessionId } } });
        const token = data?.token; // absent only from an idempotent replay
        assert.ok(token, `mint: ${JSON.stringify(error)}`);
        minted.push(token);
        return token;
      },
    });
    // The browser's client cannot call anything else with it.
    const denied = await browser.GET("/v1/sessions/{id}", { params: { path: { id: s } } });
    assert.equal(denied.response.status, 401);

    const evs: Event[] = [];
    let posted = false;
    for await (const ev of followSession(browser, s, { retryMs: 50 })) {
      evs.push(ev);
      if (ev.type === "turn/end" && !posted) {
        // The first turn's log is read; let the token expire, drop the stream, post a second turn.
        posted = true;
        await new Promise((r) => setTimeout(r, tokenTTLms + 1000));
        assert.ok((await cut()) >= 1);
        const { data } = await api.POST("/v1/sessions/{id}/messages", { params: { path: { id: s } }, body: { content: "tools:1" } });
        assert.ok(data);
      } else if (ev.type === "turn/end") {
        break;
      }
    }
    assert.ok(minted.length >= 2, `minted ${minted.length} tokens, want a fresh one after the expiry`);
    assertWhole(evs);
    assert.deepEqual(evs, await logOf(api, s));

    // A fixed token that expired is an error, not a retry loop.
    const fixed = createClient({ baseUrl: viaProxy, token: minted[0] ?? "" });
    await assert.rejects(async () => {
      for await (const ev of followSession(fixed, s)) void ev;
    }, (err: unknown) => err instanceof DshdError && err.status === 401);
  });

  await t.test("an approval is asked on the stream and answered", async () => {
    const asking = await newPreset(api, "ts-ask", { approval: { policy: "ask", ask: ["echo"], timeoutMs: 60000 } });
    const s = await newSession(api, asking);
    const evs: Event[] = [];
    for await (const ev of postMessageStream(api, s, { content: "tool:echo" })) {
      evs.push(ev);
      if (ev.type !== "approval/asked") continue;
      assert.equal(kinds(evs, "tool/result").length, 0, "the tool ran before it was approved");
      const { data: pending } = await api.GET("/v1/sessions/{id}/approvals", { params: { path: { id: s } } });
      assert.ok(pending);
      assert.equal(pending.items.length, 1);
      const approvalId = pending.items[0]?.id ?? "";
      assert.equal(approvalId, field(ev, "id"));
      const { data: decided, error } = await api.POST("/v1/sessions/{id}/approvals/{approvalId}", {
        params: { path: { id: s, approvalId } },
        body: { outcome: "allowed-once" },
      });
      assert.ok(decided, `answer: ${JSON.stringify(error)}`);
      const again = await api.POST("/v1/sessions/{id}/approvals/{approvalId}", {
        params: { path: { id: s, approvalId } },
        body: { outcome: "rejected" },
      });
      assert.equal(again.response.status, 409);
    }
    assert.equal(kinds(evs, "approval/decided").length, 1);
    const results = kinds(evs, "tool/result");
    assert.equal(results.length, 1);
    assert.notEqual(results[0] && field(results[0], "isError"), true);
    const end = evs.at(-1);
    assert.equal(end?.type, "turn/end");
    assert.deepEqual(end && field(end, "reason"), { kind: "completed" });
    assertWhole(evs);
  });

  await t.test("a running turn is cancelled", async () => {
    const s = await newSession(api, presetId);
    const evs: Event[] = [];
    for await (const ev of postMessageStream(api, s, { content: 'tool:sleep args:{"ms":60000}' })) {
      evs.push(ev);
      if (isEvent(ev, "tool/call")) {
        const { data, error } = await api.POST("/v1/sessions/{id}/cancel", { params: { path: { id: s } }, body: {} });
        assert.ok(data, `cancel: ${JSON.stringify(error)}`);
        assert.equal(data.cancelled, true);
      }
    }
    const end = evs.at(-1);
    assert.equal(end?.type, "turn/end");
    assert.deepEqual(end && field(end, "reason"), { kind: "aborted", reason: { kind: "user" } });
    assert.equal(kinds(evs, "agent/cancel").length, 1);
    assertWhole(evs);
  });

  await t.test("followSession ends when the session is deleted", async () => {
    const s = await newSession(api, presetId);
    for await (const ev of postMessageStream(api, s, { content: "text" })) void ev;
    const evs: Event[] = [];
    const longLived = new AbortController(); // outlives the stream: it keeps no listener of it
    for await (const ev of followSession(proxied, s, { retryMs: 50, signal: longLived.signal })) {
      evs.push(ev);
      if (isEvent(ev, "turn/end")) {
        assert.ok((await cut()) >= 1); // a reconnect before the delete, with its own listeners
        const { response } = await api.DELETE("/v1/sessions/{id}", { params: { path: { id: s } } });
        assert.equal(response.status, 204);
      }
    }
    assert.equal(evs.at(-1)?.type, "turn/end");
    assertWhole(evs);
    assert.equal(getEventListeners(longLived.signal, "abort").length, 0);
  });

  await t.test("an error answers a DshdError", async () => {
    await assert.rejects(
      async () => {
        for await (const ev of postMessageStream(api, "00000000-0000-0000-0000-000000000000", { content: "text" })) void ev;
      },
      (err: unknown) => err instanceof DshdError && err.status === 404 && err.code === "not_found",
    );
  });
});
