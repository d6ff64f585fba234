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
  FileKeyStore, IdempotencyKeyReusedError, MemoryKeyStore, NetworkError, OnejobClient, ProblemError, StorageKeyStore,
  backoffDelay, newTraceparent, parseRetryAfter,
} from "../dist/node.js";

let stack;
let proxy;
before(async () => {
  stack = await startStack("typescript");
  proxy = await startProxy(stack.apiUrl);
});
after(async () => {
  await proxy?.close();
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
