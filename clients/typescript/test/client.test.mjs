// The TypeScript client against the real local stack (`onejob run`), through
// a loopback proxy that fails the network on purpose. No mocks.
import assert from "node:assert/strict";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { isCreate, startProxy } from "../../harness/proxy.mjs";
import { startStack } from "../../harness/stack.mjs";
import {
  FileKeyStore, IdempotencyKeyReusedError, MemoryKeyStore, NetworkError, OnejobClient, ProblemError, StorageKeyStore, StreamedAnswer,
  backoffDelay, newTraceparent, parseRetryAfter, readSSE,
} from "../dist/node.js";

let stack;
let proxy;
// In front of the stream port: job views name it (--stream-url), so a
// client that follows stream_url goes through it.
let streams;
before(async () => {
  streams = await startProxy();
  stack = await startStack("typescript", { args: ["--stream-url", streams.url] });
  streams.retarget(stack.streamUrl);
  proxy = await startProxy(stack.apiUrl);
});
after(async () => {
  await proxy?.close();
  await streams?.close();
  await stack?.stop();
});

const demo = (prompt, simulate) => ({ type: "demo", input: simulate ? { prompt, simulate } : { prompt } });
const fast = { baseDelayMs: 10, maxDelayMs: 100 };

/** A client for owner sub, through the proxy unless direct. */
async function clientFor(sub, options = {}) {
  return new OnejobClient({ baseUrl: options.direct ? stack.apiUrl : proxy.url, token: await stack.token(sub), retry: fast, ...options });
}

/** Every job of an owner, read straight from the API. */
async function jobsOf(sub) {
  const c = await clientFor(sub, { direct: true });
  return (await c.listJobs({ limit: 100 })).jobs;
}

/** The proxy's log of creates sent with key. */
const createsWith = (key) => proxy.requests.filter((e) => isCreate(e) && e.headers["idempotency-key"] === key);

describe("submit", () => {
  test("the same intent is one job, however often it is submitted", async () => {
    const c = await clientFor("ts-same");
    const first = await c.submit("form-1", demo("hello"));
    const again = await c.submit("form-1", demo("hello"));
    assert.equal(first.replayed, false);
    assert.equal(again.replayed, true);
    assert.equal(again.job.id, first.job.id);
    assert.equal(again.key, first.key);
    assert.match(first.key, /^ik_[0-9a-f]{32}$/, "128 random bits");
    assert.equal((await c.intent("form-1")).jobId, first.job.id);
    assert.deepEqual((await jobsOf("ts-same")).map((j) => j.id), [first.job.id]);
  });

  test("a create carries the app's traceparent; none unless the app gives one", async () => {
    const tp = newTraceparent();
    assert.match(tp, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    assert.notEqual(newTraceparent(), tp, "each is new");
    const traced = await clientFor("ts-trace", { traceparent: () => tp });
    const got = await traced.submit("form-t", demo("traced"));
    assert.deepEqual(createsWith(got.key).map((e) => e.headers["traceparent"]), [tp]);
    const plain = await clientFor("ts-trace");
    const other = await plain.submit("form-p", demo("plain"));
    assert.deepEqual(createsWith(other.key).map((e) => e.headers["traceparent"]), [undefined]);
  });

  test("the key is made once and stored before the first send, even for concurrent submits", async () => {
    const store = new MemoryKeyStore();
    let storedAtSend;
    const c = await clientFor("ts-before", {
      keyStore: store,
      fetch: async (url, init) => {
        storedAtSend ??= store.get("form-1");
        return fetch(url, init);
      },
    });
    const [a, b] = await Promise.all([c.submit("form-1", demo("x")), c.submit("form-1", demo("x"))]);
    assert.ok(storedAtSend, "the key was stored before anything was sent");
    assert.equal(storedAtSend.key, a.key);
    assert.equal(a.key, b.key);
    assert.equal(a.job.id, b.job.id);
    assert.deepEqual([a.replayed, b.replayed].sort(), [false, true]);
    assert.equal((await jobsOf("ts-before")).length, 1);
  });

  test("a swallowed answer is retried with the same key and gets the same job", async () => {
    const retries = [];
    const c = await clientFor("ts-swallow", { onRetry: (r) => retries.push(r) });
    const swallowed = proxy.swallow((e) => isCreate(e) && e.headers.authorization.includes(".") && e.body.includes("swallow-1"));
    const got = await c.submit("form-1", demo("swallow-1"));
    const [lost] = await swallowed.after(1);
    assert.equal(lost.status, 201, "the server created the job, the client never heard");
    assert.equal(got.job.id, JSON.parse(lost.responseBody).id);
    assert.equal(got.replayed, true);
    assert.deepEqual(createsWith(got.key).map((e) => e.fate), ["swallowed", "passed"]);
    assert.deepEqual(retries.map((r) => r.reason), ["network"]);
    assert.deepEqual((await jobsOf("ts-swallow")).map((j) => j.id), [got.job.id]);
  });

  test("a new client over the same key store resumes the same job", async () => {
    const file = join(await mkdtemp(join(tmpdir(), "onejob-keys-")), "intents.json");
    const first = await clientFor("ts-resume", { keyStore: new FileKeyStore(file), retry: { ...fast, maxAttempts: 2 } });
    // The network swallows every answer: the app gives up (or is killed).
    const swallowed = proxy.swallow((e) => isCreate(e) && e.body.includes("resume-1"), 2);
    await assert.rejects(first.submit("checkout-42", demo("resume-1")), NetworkError);
    const lost = await swallowed.after(2);
    const stored = await new FileKeyStore(file).get("checkout-42");
    assert.ok(stored?.key, "the intent survived in the file");
    assert.equal(stored.jobId, undefined, "no answer ever named the job");

    // Restart: a new client over the same file, resuming without the body.
    const second = await clientFor("ts-resume", { keyStore: new FileKeyStore(file) });
    const got = await second.submit("checkout-42");
    assert.equal(got.key, stored.key);
    assert.equal(got.replayed, true);
    assert.equal(got.job.id, JSON.parse(lost[0].responseBody).id);
    assert.deepEqual((await jobsOf("ts-resume")).map((j) => j.id), [got.job.id]);
    await second.forget("checkout-42");
    assert.equal(await new FileKeyStore(file).get("checkout-42"), undefined);
  });

  test("5xx and 429 are retried with backoff, never sooner than Retry-After", async () => {
    const pauses = [];
    const c = await clientFor("ts-retry-after", {
      random: () => 0.5,
      sleep: async (ms) => void pauses.push(ms),
      retry: { baseDelayMs: 100, maxDelayMs: 1000, maxAttempts: 6 },
    });
    const mine = (e) => isCreate(e) && e.body.includes("retry-after-1");
    proxy.fail(mine, 1, 503, { "Retry-After": "3", "Content-Type": "application/problem+json" },
      JSON.stringify({ type: "https://onejob.dev/problems/unavailable", title: "Service unavailable", status: 503, detail: "x", request_id: "r" }));
    proxy.fail(mine, 1, 429, { "Content-Type": "application/json" }, '{"message":"Too Many Requests"}');
    proxy.fail(mine, 1, 500, {}, "");
    const got = await c.submit("form-1", demo("retry-after-1"));
    assert.equal(got.replayed, false);
    // Full jitter at 0.5: half of 100·2^n; the 503's Retry-After wins.
    assert.deepEqual(pauses, [3000, 100, 200]);
    const sent = proxy.requests.filter(mine);
    assert.deepEqual(sent.map((e) => e.status), [503, 429, 500, 201]);
    assert.equal(new Set(sent.map((e) => e.headers["idempotency-key"])).size, 1, "one key for every try");
    assert.equal((await jobsOf("ts-retry-after")).length, 1);
  });

  test("other 4xx are thrown at once, typed, never retried", async () => {
    const pauses = [];
    const c = await clientFor("ts-4xx", { sleep: async (ms) => void pauses.push(ms) });
    const err = await c.submit("form-1", { type: "no-such-type", input: { prompt: "x" } }).catch((e) => e);
    assert.ok(err instanceof ProblemError);
    assert.equal(err.status, 422);
    assert.equal(err.code, "unknown-job-type");
    assert.ok(err.requestId);
    const stranger = new OnejobClient({ baseUrl: proxy.url, token: "not-a-token", sleep: async (ms) => void pauses.push(ms) });
    const unauth = await stranger.submit("form-1", demo("x")).catch((e) => e);
    assert.equal(unauth.status, 401);
    assert.equal(unauth.code, "unauthenticated");
    assert.deepEqual(pauses, []);
    assert.equal(createsWith((await c.intent("form-1")).key).length, 1, "sent once");
  });

  test("the same intent with edited input is a typed conflict carrying the job, and no second job", async () => {
    const c = await clientFor("ts-conflict");
    const first = await c.submit("form-1", demo("original"));
    const err = await c.submit("form-1", demo("edited")).catch((e) => e);
    assert.ok(err instanceof IdempotencyKeyReusedError, String(err));
    assert.equal(err.status, 409);
    assert.equal(err.jobId, first.job.id);
    assert.deepEqual((await jobsOf("ts-conflict")).map((j) => j.id), [first.job.id]);
    // The user starts over: a new intent, a new job.
    await c.forget("form-1");
    const fresh = await c.submit("form-1", demo("edited"));
    assert.notEqual(fresh.key, first.key);
    assert.equal((await jobsOf("ts-conflict")).length, 2);
  });

  test("a browser-style string store keeps intents as JSON", async () => {
    const items = new Map();
    const storage = { getItem: (k) => items.get(k) ?? null, setItem: (k, v) => void items.set(k, v), removeItem: (k) => void items.delete(k) };
    const c = await clientFor("ts-storage", { keyStore: new StorageKeyStore(storage) });
    const got = await c.submit("form-1", demo("stored"));
    const raw = JSON.parse(items.get("onejob.intent.form-1"));
    assert.equal(raw.key, got.key);
    assert.equal(raw.jobId, got.job.id);
    assert.deepEqual(raw.body, demo("stored"));
    // An AsyncStorage-like store (promises) fits the same adapter.
    const asyncStorage = { getItem: async (k) => storage.getItem(k), setItem: async (k, v) => storage.setItem(k, v), removeItem: async (k) => storage.removeItem(k) };
    assert.equal((await new StorageKeyStore(asyncStorage).get("form-1")).key, got.key);
  });
});

describe("wait", () => {
  test("follows every change with ETag and Prefer: wait, and ends at the outcome", async () => {
    const c = await clientFor("ts-wait");
    const { job } = await c.submit("form-1", demo("wait-1", { "sim-primary": { latency_ms: 1000 } }));
    const updates = [];
    const done = await c.wait(job.id, { onUpdate: (j) => updates.push(j) });
    assert.equal(done.status, "succeeded");
    assert.equal(updates.at(-1).status, "succeeded");
    assert.ok(updates.length >= 2, `updates ${updates.map((u) => u.status)}`);
    for (let i = 1; i < updates.length; i++) {
      assert.notDeepEqual(updates[i], updates[i - 1], "onUpdate only for a change");
    }
    const gets = proxy.requests.filter((e) => e.method === "GET" && e.path === "/v1/jobs/" + job.id);
    assert.equal(gets[0].headers["if-none-match"], undefined);
    for (const g of gets.slice(1)) {
      assert.ok(g.headers["if-none-match"], "later reads are conditional");
      assert.equal(g.headers.prefer, "wait=20");
    }
    // Each read either waited for a change or saw one: nothing hammered.
    assert.ok(gets.length <= updates.length + 1, `${gets.length} reads for ${updates.length} updates`);
  });

  test("honours an AbortSignal, also while the server holds the request", async () => {
    const c = await clientFor("ts-abort");
    const { job } = await c.submit("form-1", demo("abort-1", { "sim-primary": { latency_ms: 1800 } }));
    const ac = new AbortController();
    const held = proxy.hold((e) => e.method === "GET" && e.path === "/v1/jobs/" + job.id && e.headers.prefer !== undefined);
    const waiting = c.wait(job.id, { signal: ac.signal });
    // Abort once a held read is in flight; the proxy keeps its answer.
    await new Promise((resolve) => {
      const t = setInterval(() => {
        if (proxy.requests.some((e) => e.path === "/v1/jobs/" + job.id && e.headers.prefer !== undefined)) {
          clearInterval(t);
          resolve();
        }
      }, 10);
    });
    ac.abort();
    await assert.rejects(waiting, { name: "AbortError" });
    held.release();
  });
});

describe("backoff", () => {
  test("full jitter stays under the doubling ceiling, capped", () => {
    const p = { maxAttempts: 9, baseDelayMs: 100, maxDelayMs: 1000 };
    assert.equal(backoffDelay(0, p, () => 0.999), 99);
    assert.equal(backoffDelay(3, p, () => 0.999), 799);
    assert.equal(backoffDelay(8, p, () => 0.999), 999);
    assert.equal(backoffDelay(8, p, () => 0), 0);
    assert.equal(backoffDelay(0, p, () => 0.5, 5000), 5000, "Retry-After is a floor");
  });
  test("Retry-After in seconds or as an HTTP date", () => {
    assert.equal(parseRetryAfter("7"), 7000);
    assert.equal(parseRetryAfter("Wed, 21 Oct 2015 07:28:10 GMT", Date.parse("Wed, 21 Oct 2015 07:28:00 GMT")), 10_000);
    assert.equal(parseRetryAfter("soon"), undefined);
    assert.equal(parseRetryAfter(null), undefined);
  });
});

// A demo-stream job (stream: true) whose answer repeats n words at the
// given pace: about n + 3 deltas.
const words = (n, tag) => Array.from({ length: n }, (_, i) => `${tag}${i}`).join(" ");
const streamed = (prompt, pace = { first_token_ms: 100, tokens_per_second: 200 }) =>
  ({ type: "demo-stream", stream: true, input: { prompt, simulate: { "sim-primary": pace } } });
const streamOf = (job) => (e) => e.path.startsWith(new URL(job.stream_url).pathname);

/** Reads a stream to its end, applying every event; returns the events and the answer. */
async function follow(c, job, options = {}) {
  const events = [];
  const answer = new StreamedAnswer();
  for await (const ev of c.jobs.stream(job, options)) {
    events.push(ev);
    answer.apply(ev); // throws on a repeated or missing delta
  }
  return { events, answer };
}

/** The id of the last whole event in an event stream's text. */
function lastWholeID(text) {
  const whole = text.slice(0, text.lastIndexOf("\n\n") + 2);
  const ids = [...whole.matchAll(/^id: (.*)$/gm)];
  return ids.at(-1)?.[1];
}

describe("stream", () => {
  test("follows a job at the stream_url its view names, its text forming, to the final event, which is GET's body", async () => {
    const c = await clientFor("ts-stream");
    const { job } = await c.submit("form-1", streamed(words(40, "w")));
    assert.equal(job.stream, true);
    assert.ok(job.stream_url.startsWith(streams.url + "/v1/jobs/"), `stream_url ${job.stream_url} names the proxy in front`);
    const { events, answer } = await follow(c, job.id);
    assert.deepEqual(events.slice(0, 1).map((e) => e.type), ["attempt.started"]);
    assert.ok(events.filter((e) => e.type === "output.delta").length >= 2, "the text came in pieces");
    assert.equal(events.at(-1).type, "job.succeeded");
    assert.deepEqual(answer.job, await c.getJob(job.id), "the final event carries the job as GET answers it");
    assert.equal(answer.text, answer.job.result.text, "the deltas built the answer's text");
    assert.match(answer.text, /w39$/);
    // One connection sufficed; it was an event stream, never built by the client.
    const conns = streams.requests.filter(streamOf(job));
    assert.equal(conns.length, 1);
    assert.equal(conns[0].headers.accept, "text/event-stream");
    assert.equal(conns[0].headers["last-event-id"], undefined);
  });

  test("a connection cut mid-event and at an event boundary is resumed after the last whole event: no text repeated or missing", async () => {
    const c = await clientFor("ts-stream-cut", { random: () => 0 });
    const { job } = await c.submit("form-1", streamed(words(60, "c"), { first_token_ms: 100, tokens_per_second: 100 }));
    const mine = (e) => streamOf(job)(e) && e.headers.accept === "text/event-stream";
    // The first connection dies in the middle of its fifth event, the
    // second right after the fourth event it carries.
    const nth = (text, n) => {
      let at = -1;
      for (let i = 0; i < n; i++) {
        at = text.indexOf("\n\n", at + 1);
        if (at < 0) return undefined;
      }
      return at + 2;
    };
    const mid = streams.sever(mine, 1, (t) => {
      const four = nth(t, 4);
      const five = nth(t, 5);
      return five === undefined ? undefined : four + Math.floor((five - four) / 2);
    });
    const boundary = streams.sever((e) => mine(e) && e.headers["last-event-id"] !== undefined, 1, (t) => nth(t, 4));
    const reconnects = [];
    const { answer } = await follow(c, job, { onReconnect: (r) => reconnects.push(r) });
    const [cut1] = await mid.after(1);
    const [cut2] = await boundary.after(1);
    assert.equal(answer.text, answer.job.result.text);
    assert.equal(answer.job.status, "succeeded");
    const conns = streams.requests.filter(mine);
    assert.equal(conns.length, 3, "two cuts, two resumptions");
    assert.equal(conns[1].headers["last-event-id"], lastWholeID(cut1.responseBody), "resumed after the last whole event before the cut");
    assert.equal(conns[2].headers["last-event-id"], lastWholeID(cut2.responseBody));
    assert.deepEqual(reconnects.map((r) => r.reason), ["cut", "cut"]);
  });

  test("the network cut and restored: it reconnects with a growing backoff, then goes on where it was", async () => {
    const c = await clientFor("ts-stream-down");
    const { job } = await c.submit("form-1", streamed(words(80, "d"), { first_token_ms: 100, tokens_per_second: 60 }));
    const reconnects = [];
    const events = [];
    const answer = new StreamedAnswer();
    const refusedBefore = streams.refused;
    let cutAt;
    // Each reconnection resumes after the last event the loop was given.
    const onReconnect = (r) => reconnects.push({ ...r, last: events.at(-1).id });
    for await (const ev of c.jobs.stream(job, { onReconnect, reconnect: { baseDelayMs: 50, maxDelayMs: 400 } })) {
      events.push(ev);
      answer.apply(ev);
      if (cutAt === undefined && ev.type === "output.delta" && ev.data.seq === 3) {
        cutAt = ev.id;
        streams.cut();
        // Down until the client has tried three times (the network
        // refusing the last two), then back.
        void (async () => {
          while (reconnects.length < 3 || streams.refused < refusedBefore + 2) await new Promise((r) => setTimeout(r, 20));
          streams.restore();
        })();
      }
    }
    assert.ok(cutAt, "cut mid-answer");
    assert.equal(answer.text, answer.job.result.text);
    assert.ok(reconnects.length >= 3, `reconnects ${JSON.stringify(reconnects)}`);
    assert.deepEqual(reconnects.slice(0, 3).map((r) => r.attempt), [1, 2, 3], "failures in a row count up");
    assert.ok(reconnects.every((r) => r.after === r.last && r.after === reconnects[0].after), "every try resumes after the last event received");
    const resumed = streams.requests.filter((e) => streamOf(job)(e) && e.headers["last-event-id"] !== undefined);
    assert.deepEqual(resumed.map((e) => e.headers["last-event-id"]), [reconnects[0].after], "one resumption got through, after the cut");
  });

  test("where a body cannot be read as it arrives (React Native's fetch), it reads the long-poll form: the same events", async () => {
    const c = await clientFor("ts-stream-poll");
    const { job } = await c.submit("form-1", streamed(words(30, "p"), { first_token_ms: 300, tokens_per_second: 50 }));
    // A fetch whose responses carry no readable body, as React Native's.
    const noBodies = await clientFor("ts-stream-poll", {
      fetch: async (url, init) => {
        const res = await fetch(url, init);
        await res.body?.cancel();
        return { status: res.status, headers: res.headers, body: null, json: () => Promise.reject(new Error("no body")) };
      },
    });
    const polled = [];
    const c2 = await clientFor("ts-stream-poll", {
      fetch: async (url, init) => {
        if (init.headers.Accept === "application/json") polled.push(String(url));
        return fetch(url, init);
      },
    });
    // noBodies proves the switch is made (its pages cannot be read either:
    // a dropped connection each, retried until it gives up)...
    const first = noBodies.jobs.stream(job, { reconnect: { maxAttempts: 2, baseDelayMs: 1, maxDelayMs: 1 } });
    await assert.rejects(first.next(), NetworkError);
    const sent = streams.requests.filter((e) => streamOf(job)(e) && e.headers.authorization?.length);
    assert.ok(sent.some((e) => e.headers.accept === "text/event-stream") && sent.some((e) => e.headers.accept === "application/json" && e.path.includes("wait=20")),
      "tried the event stream, then the long-poll form");
    // ...and a client told to poll reads the whole answer in pages.
    const viaPoll = await follow(c2, job, { transport: "poll" });
    const viaSSE = await follow(c, job);
    assert.deepEqual(viaPoll.events.map((e) => [e.id, e.type]), viaSSE.events.map((e) => [e.id, e.type]));
    assert.equal(viaPoll.answer.text, viaPoll.answer.job.result.text);
    assert.ok(polled.length >= 1 && polled.every((u) => new URL(u).searchParams.get("wait") === "20"));
  });

  test("resumes from an event a previous read received, in either form", async () => {
    const c = await clientFor("ts-stream-after");
    const { job } = await c.submit("form-1", streamed(words(20, "a")));
    const all = await follow(c, job);
    const k = 5;
    const rest = [];
    for await (const ev of c.jobs.stream(job, { after: all.events[k - 1].id })) rest.push(ev);
    assert.deepEqual(rest.map((e) => e.id), all.events.slice(k).map((e) => e.id), "strictly after");
    const restPolled = [];
    for await (const ev of c.jobs.stream(job, { after: all.events[k - 1].id, transport: "poll" })) restPolled.push(ev);
    assert.deepEqual(restPolled.map((e) => e.id), rest.map((e) => e.id));
    // After the final event there is nothing more (204): the loop just ends.
    const none = [];
    for await (const ev of c.jobs.stream(job, { after: all.events.at(-1).id })) none.push(ev);
    assert.deepEqual(none, []);
  });

  test("a job not streamed has no deltas: its attempts and its end", async () => {
    const c = await clientFor("ts-stream-none");
    const { job } = await c.submit("form-1", demo("not streamed"));
    const { events, answer } = await follow(c, job.id);
    assert.deepEqual(events.map((e) => e.type), ["attempt.started", "job.succeeded"]);
    assert.equal(answer.job.result.text, "sim-primary answered: not streamed");
  });

  test("another owner's job is not found, thrown at once; an abort ends the loop and closes the connection", async () => {
    const c = await clientFor("ts-stream-owner");
    const { job } = await c.submit("form-1", streamed(words(50, "o"), { first_token_ms: 100, tokens_per_second: 20 }));
    const stranger = await clientFor("ts-stream-stranger", { sleep: async () => assert.fail("a 404 is not retried") });
    const err = await stranger.jobs.stream(job).next().catch((e) => e);
    assert.ok(err instanceof ProblemError, String(err));
    assert.equal(err.status, 404);
    const ac = new AbortController();
    const seen = [];
    await assert.rejects((async () => {
      for await (const ev of c.jobs.stream(job, { signal: ac.signal })) {
        seen.push(ev);
        if (ev.type === "output.delta") ac.abort();
      }
    })(), { name: "AbortError" });
    assert.equal(seen.at(-1).type, "output.delta");
  });

  test("readSSE reads the standard's line ends, comments, ids and unfinished events", async () => {
    const parts = ["\ufeffid: 1\r\nevent: a\r", "\ndata: x\r\n\r\n: hb\n\nid: 2\rdata: y\rdata: z\r\r", "data: w\n\nid: 3\nevent: b\ndata: half"];
    const body = new ReadableStream({
      start(ctl) {
        for (const p of parts) ctl.enqueue(new TextEncoder().encode(p));
        ctl.close();
      },
    });
    const got = [];
    for await (const m of readSSE(body)) got.push(m);
    assert.deepEqual(got, [
      { type: "a", data: "x", id: "1" },
      { type: "message", data: "y\nz", id: "2" },
      { type: "message", data: "w", id: "2" },
    ]);
  });
});
