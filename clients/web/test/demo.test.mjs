// The double click, proven in a real browser: Chromium drives the demo page
// (clients/web/demo) against the real local stack through a loopback proxy
// that fails the network on purpose. The page is served from localhost and
// calls the API at 127.0.0.1: another origin, so every call goes through
// CORS as it would against a deployed API. After each scenario the owner's
// listing must hold exactly one job.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { launchBrowser, newPage, screenshot } from "../../harness/browser.mjs";
import { isCreate, startProxy } from "../../harness/proxy.mjs";
import { startStack } from "../../harness/stack.mjs";
import { OnejobClient } from "../../typescript/dist/node.js";

let stack;
let proxy;
let streams; // in front of the stream port: every job view's stream_url names it
let browser;
before(async () => {
  streams = await startProxy();
  [stack, browser] = await Promise.all([startStack("web", { args: ["--stream-url", streams.url] }), launchBrowser()]);
  streams.retarget(stack.streamUrl);
  proxy = await startProxy(stack.apiUrl);
});
after(async () => {
  await browser?.close();
  await proxy?.close();
  await streams?.close();
  await stack?.stop();
});

/** Opens the demo page as owner sub, its API calls through the proxy. */
async function open(sub) {
  const token = await stack.token(sub);
  const { context, page, errors } = await newPage(browser);
  await page.goto(stack.pageUrl("demo", { api: proxy.url, token }));
  await page.waitForSelector("body[data-ready=true]");
  const mine = (e) => isCreate(e) && e.headers.authorization === `Bearer ${token}`;
  return { context, page, errors, token, mine };
}

/** The owner's jobs, read straight from the API (not through the page). */
async function jobsOf(token) {
  const c = new OnejobClient({ baseUrl: stack.apiUrl, token });
  return (await c.listJobs({ limit: 100 })).jobs;
}

/** Waits until the page lists n clicks, and returns them. */
async function clicks(page, n) {
  await page.waitForFunction((n) => document.querySelectorAll("#clicks li").length >= n, n);
  return page.$$eval("#clicks li", (lis) => lis.map((li) => ({ outcome: li.dataset.outcome, jobId: li.dataset.jobId ?? "", text: li.textContent })));
}

const idOf = (entry) => JSON.parse(entry.responseBody).id;

test("(a) a double click while the provider is slow is one job; both clicks show it", async () => {
  const { context, page, errors, token, mine } = await open("web-double-click");
  await page.selectOption("#primary", "slow");
  // Hold the first answer until the second click's request has reached the
  // server too: the two requests are in flight at once.
  const held = proxy.hold(mine, 2);
  await page.dblclick("#start");
  const [first, second] = await held.after(2);
  held.release();
  assert.equal(first.headers["idempotency-key"], second.headers["idempotency-key"], "one key for the intent");
  assert.deepEqual([first.status, second.status].sort(), [200, 201]);
  // Cross-origin: the browser asked first (a preflight, answered before any
  // token is checked) and named the page's origin on the creates.
  const origin = new URL(page.url()).origin;
  assert.ok(proxy.requests.some((e) => e.method === "OPTIONS" && e.headers.origin === origin &&
    e.headers["access-control-request-method"] === "POST" && e.status === 204), "a CORS preflight was answered");
  assert.equal(first.headers.origin, origin);
  const shown = await clicks(page, 2);
  assert.deepEqual(shown.map((c) => c.outcome).sort(), ["created", "replayed"]);
  assert.equal(shown[0].jobId, shown[1].jobId);
  assert.equal(shown[0].jobId, idOf(first));
  // Live status and the timeline: the slow primary finishes the job.
  await page.waitForSelector("#status[data-status=succeeded]", { timeout: 20_000 });
  await page.waitForSelector('#timeline rect[data-attempt="1"][data-state=succeeded]');
  console.log("screenshot:", await screenshot(page, "a-double-click"));
  assert.deepEqual((await jobsOf(token)).map((j) => j.id), [shown[0].jobId]);
  assert.deepEqual(errors, []);
  await context.close();
});

test("(b) the answer is swallowed, the user clicks again: the same job", async () => {
  const { context, page, errors, token, mine } = await open("web-swallowed");
  // Every answer to a create is lost on the way back (the client's retries,
  // and Chromium's own resend on a fresh connection, included).
  const swallowed = proxy.swallow(mine, Infinity);
  await page.click("#start");
  const [failed] = await clicks(page, 1);
  assert.equal(failed.outcome, "error");
  swallowed.stop();
  const lost = swallowed.matched;
  assert.ok(lost.length >= 2, `the client retried (${lost.length} sends)`);
  assert.equal(new Set(lost.map((e) => e.headers["idempotency-key"])).size, 1, "every retry sent the same key");
  assert.equal(lost[0].status, 201, "the first send created the job; its answer was lost");
  await page.click("#start");
  const [, again] = await clicks(page, 2);
  assert.equal(again.outcome, "replayed");
  assert.equal(again.jobId, idOf(lost[0]));
  await page.waitForSelector("#status[data-status=succeeded]", { timeout: 20_000 });
  console.log("screenshot:", await screenshot(page, "b-swallowed-answer"));
  assert.deepEqual((await jobsOf(token)).map((j) => j.id), [again.jobId]);
  assert.deepEqual(errors, []);
  await context.close();
});

test("(c) the page is reloaded mid-request and the user clicks again: the same job", async () => {
  const { context, page, errors, token, mine } = await open("web-reload");
  const held = proxy.hold(mine, 1);
  await page.click("#start");
  const [inFlight] = await held.after(1); // the server created it; the answer is on hold
  await page.reload();
  await page.waitForSelector("body[data-ready=true]");
  held.release();
  // The key survived in localStorage; the page says so.
  await page.waitForSelector("#notice:not([hidden])");
  assert.equal(await page.textContent("#intent-key"), inFlight.headers["idempotency-key"]);
  await page.click("#start");
  const [again] = await clicks(page, 1);
  assert.equal(again.outcome, "replayed");
  assert.equal(again.jobId, idOf(inFlight));
  await page.waitForSelector("#status[data-status=succeeded]", { timeout: 20_000 });
  console.log("screenshot:", await screenshot(page, "c-reload-mid-request"));
  assert.deepEqual((await jobsOf(token)).map((j) => j.id), [again.jobId]);
  assert.deepEqual(errors, []);
  await context.close();
});

test("(d) the same intent with edited input shows the conflict, and no second job exists", async () => {
  const { context, page, errors, token } = await open("web-edited");
  await page.click("#start");
  const [created] = await clicks(page, 1);
  assert.equal(created.outcome, "created");
  await page.fill("#prompt", "hello again, edited");
  await page.click("#start");
  const [, conflict] = await clicks(page, 2);
  assert.equal(conflict.outcome, "conflict");
  assert.equal(conflict.jobId, created.jobId);
  await page.waitForSelector("#conflict:not([hidden])");
  assert.match(await page.textContent("#conflict"), new RegExp(created.jobId));
  await page.waitForSelector("#status[data-status=succeeded]", { timeout: 20_000 });
  console.log("screenshot:", await screenshot(page, "d-edited-input-conflict"));
  assert.deepEqual((await jobsOf(token)).map((j) => j.id), [created.jobId]);
  assert.deepEqual(errors, []);
  await context.close();
});

test("(e) the job's webhook deliveries show on the page, every try", async () => {
  const { context, page, errors, token } = await open("web-deliveries");
  // A receiver on loopback that refuses the first try of each event and
  // verifies every one with the endpoint's secret.
  const { createServer } = await import("node:http");
  const { verifyWebhook } = await import("../../typescript/dist/index.js");
  let secret = "";
  const seen = new Map(); // webhook-id → tries
  const verified = [];
  const receiver = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", async () => {
      const body = Buffer.concat(chunks);
      const id = req.headers["webhook-id"];
      seen.set(id, (seen.get(id) ?? 0) + 1);
      try {
        verified.push((await verifyWebhook(secret, req.headers, new Uint8Array(body))).type);
      } catch (err) {
        verified.push(`refused: ${err.message}`);
      }
      res.writeHead(seen.get(id) === 1 ? 503 : 204).end();
    });
  });
  await new Promise((r) => receiver.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${receiver.address().port}/hooks`;
  const created = await fetch(`${stack.apiUrl}/v1/webhook-endpoints`, {
    method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ url }),
  });
  assert.equal(created.status, 201);
  secret = (await created.json()).secret;
  await page.click("#start");
  await page.waitForSelector("#status[data-status=succeeded]", { timeout: 20_000 });
  await page.waitForSelector('#deliveries tr[data-state=delivered][data-type="job.succeeded"][data-tries="2"]', { timeout: 30_000 });
  const row = await page.textContent("#deliveries tbody tr");
  assert.match(row, /job\.succeeded/);
  assert.match(row, /503 \d+ ms, 204 \d+ ms/);
  assert.deepEqual(verified, ["job.succeeded", "job.succeeded"]);
  assert.equal(seen.size, 1, "one webhook-id for the event, on both tries");
  console.log("screenshot:", await screenshot(page, "e-webhook-deliveries"));
  assert.deepEqual(errors, []);
  await context.close();
  await new Promise((r) => receiver.close(r));
});

test("(f) a streamed answer forms on the page while the job runs, and goes on after the network is cut and restored, nothing repeated or missing", async () => {
  const { context, page, errors, token } = await open("web-stream");
  // About 150 deltas at 50 tokens a second: three seconds of answer.
  const prompt = Array.from({ length: 150 }, (_, i) => `word${i}`).join(" ");
  await page.check("#stream");
  await page.fill("#prompt", prompt);
  await page.click("#start");
  const [created] = await clicks(page, 1);
  assert.equal(created.outcome, "created");
  const api = new OnejobClient({ baseUrl: stack.apiUrl, token });
  const id = created.jobId;
  // Text arrives while the job runs (the first deltas may carry the
  // provider's name alone: wait for the prompt's first word; either
  // provider, paced alike, may answer).
  await page.waitForFunction(() => Number(document.querySelector("#answer").dataset.deltas) >= 3 &&
    /^sim-(primary|fallback) answered: word0/.test(document.querySelector("#answer").textContent), null, { timeout: 20_000 });
  assert.equal(await page.getAttribute("#answer", "data-final"), null, "still provisional");
  assert.equal((await api.getJob(id)).status, "running", "the job still runs while its text shows");
  console.log("screenshot:", await screenshot(page, "f-stream-forming"));
  // The network to the stream goes down mid-answer: the page says it is
  // reconnecting, with a backoff, and is refused twice.
  const refused = streams.refused;
  streams.cut();
  await page.waitForFunction(() => document.querySelector("#stream-state").textContent.startsWith("reconnecting"));
  while (streams.refused < refused + 2) await new Promise((r) => setTimeout(r, 20));
  const duringCut = await page.textContent("#answer");
  console.log("screenshot:", await screenshot(page, "f-stream-cut"));
  streams.restore();
  await page.waitForSelector("#answer[data-final=succeeded]", { timeout: 30_000 });
  const done = await api.getJob(id);
  assert.equal(done.status, "succeeded");
  // What the page built from the deltas, before and after the cut, is the
  // answer exactly: no text repeated, none missing.
  assert.equal(await page.textContent("#answer"), done.result.text);
  assert.ok(duringCut.length < done.result.text.length, "the cut came before the answer was whole");
  assert.ok(Number(await page.getAttribute("#answer", "data-reconnects")) >= 2);
  assert.equal(await page.isHidden("#error"), true, await page.textContent("#error"));
  // The browser resumed after the last event it had: one resumption got
  // through, carrying Last-Event-ID, from the page's origin (CORS).
  const path = new URL(done.stream_url).pathname;
  const conns = streams.requests.filter((e) => e.path === path && e.method === "GET");
  const resumed = conns.filter((e) => e.headers["last-event-id"] !== undefined);
  assert.ok(resumed.length >= 1, `${conns.length} connections`);
  assert.equal(resumed[0].headers.origin, new URL(page.url()).origin);
  await page.waitForSelector("#status[data-status=succeeded]", { timeout: 20_000 });
  console.log("screenshot:", await screenshot(page, "f-stream-done"));
  assert.deepEqual(errors, []);
  await context.close();
});
