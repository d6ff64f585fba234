// The operator console (internal/apigw/console, served by the API itself at
// /console) in a real browser against the real local stack: opened through
// the link `onejob run` prints (the admin token in its fragment), it finds a
// blocked job, resolves its unknown attempt with a reason and a
// confirmation and shows the fallback's success; it draws a hedged job's
// race; it cancels with a reason; it shows problem documents; it shows each
// provider's health and forces one open and back; it groups blocked jobs by
// provider and resolves an incident's attempts in bulk (a dry-run count, a
// reason, a confirmation, the result); it draws a job's trace, every
// function's spans under their parents, from onejob run's own span store
// (no collector). Screenshots go to
// .local/screenshots/console-*.png.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { launchBrowser, newPage, screenshot } from "../../harness/browser.mjs";
import { startStack } from "../../harness/stack.mjs";
import { OnejobClient } from "../../typescript/dist/node.js";

let stack;
let browser;
let owner; // a client of an ordinary user: the jobs are theirs, not the operator's
before(async () => {
  [stack, browser] = await Promise.all([startStack("console"), launchBrowser()]);
  owner = new OnejobClient({ baseUrl: stack.apiUrl, token: await stack.token("console-user") });
});
after(async () => {
  await browser?.close();
  await stack?.stop();
});

const demo = (simulate, type = "demo") => ({ type, input: { prompt: "x", simulate } });
const timesOut = demo({ "sim-primary": { outcome: "timeout" } });

/** Waits, on the server (held GETs), until the job has status. */
async function untilStatus(id, status) {
  const abort = new AbortController();
  let seen;
  try {
    await owner.wait(id, {
      signal: abort.signal,
      onUpdate: (job) => {
        seen = job;
        if (job.status === status) {
          abort.abort();
        }
      },
    });
  } catch (err) {
    if (!abort.signal.aborted) {
      throw err;
    }
  }
  assert.equal(seen?.status, status, `job ${id} ended ${seen?.status} before it was ${status}`);
  return seen;
}

/** The console, opened through the printed link; resolves once it is ready. */
async function openConsole(url = stack.consoleUrl) {
  const { context, page, errors } = await newPage(browser);
  await page.setViewportSize({ width: 1280, height: 900 }); // an operator's desktop
  // Every Content-Security-Policy violation, as the page sees it.
  await page.addInitScript(() => {
    window.cspViolations = [];
    document.addEventListener("securitypolicyviolation", (e) => window.cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  const response = await page.goto(url);
  await page.waitForSelector("body[data-ready=true]");
  const violations = () => page.evaluate(() => window.cspViolations);
  return { context, page, errors, violations, response };
}

/** What the timeline shows, lane by lane. */
function lanes(page) {
  return page.$$eval("#lanes li.lane", (lis) => lis.map((li) => {
    const bar = li.querySelector(".bar");
    return {
      attempt: Number(li.dataset.attempt), provider: li.dataset.provider, state: li.dataset.state, role: li.dataset.role,
      hedge: li.dataset.hedge === "true", winner: li.dataset.winner === "true",
      badges: [...li.querySelectorAll(".badge")].map((b) => b.textContent),
      left: parseFloat(bar.style.left), width: parseFloat(bar.style.width), label: li.getAttribute("aria-label"),
      colour: getComputedStyle(bar).backgroundColor,
    };
  }));
}

test("a blocked job: found in the list, resolved failed with a reason and a confirmation, then its fallback succeeds", async () => {
  assert.match(stack.consoleUrl, /\/console#token=ey/, "onejob run prints the console's link with the admin token");
  const id = (await owner.submit("console-blocked", timesOut)).job.id;
  await untilStatus(id, "unknown"); // after the run's 2 s timeout

  const { context, page, errors, violations, response } = await openConsole();
  // Served by the API without a token, with its policy; the token is out of the address bar.
  assert.equal(response.status(), 200);
  assert.match(response.headers()["content-security-policy"], /default-src 'self'.*connect-src 'self'.*frame-ancestors 'none'/);
  assert.equal(response.headers()["x-content-type-options"], "nosniff");
  assert.equal(new URL(page.url()).hash, "", "the token was removed from the address bar");
  assert.doesNotMatch(await page.evaluate(() => location.href), /token/);
  await page.locator('#who[data-admin="true"]').waitFor(); // the API listed jobs across owners for it
  assert.match(await page.textContent("#who"), /^operator, expires .* · operator$/);

  // The blocked list holds it (another owner's job), oldest first.
  const row = page.locator(`#blocked tr[data-job-id="${id}"]`);
  await row.waitFor();
  assert.equal(await row.getAttribute("data-status"), "unknown");
  await row.locator("button[data-open-job]").click();
  await page.locator('#lanes li[data-attempt="1"][data-state="unknown"]').waitFor();
  assert.equal(await page.textContent("#job-id"), id);
  assert.match(await page.textContent('#attempts tr[data-attempt="1"]'), /ambiguous/);
  console.log("screenshot:", await screenshot(page, "console-blocked"));

  // Resolve: the reason is required, and a confirmation comes first.
  await page.click('button[data-resolve="1"]');
  await page.check('input[name="outcome"][value="succeeded"]');
  assert.equal(await page.isVisible("#resolve-result"), true, "a succeeded outcome asks for the result");
  await page.check('input[name="outcome"][value="failed"]');
  assert.equal(await page.isVisible("#resolve-result"), false);
  await page.click("#resolve-review");
  assert.equal(await page.getAttribute("#resolve-reason", "aria-invalid"), "true");
  assert.equal(await page.isVisible("#resolve-confirm"), false, "no confirmation without a reason");
  await page.fill("#resolve-reason", "checked with sim-primary: the request never ran");
  await page.click("#resolve-review");
  await page.locator("#resolve-confirm").waitFor();
  assert.match(await page.textContent("#resolve-summary"), /attempt 1 .* as failed.*never ran/);
  console.log("screenshot:", await screenshot(page, "console-resolve-confirm"));
  await page.click("#resolve-confirm-button");

  // The fallback runs and wins; the timeline shows it live.
  await page.locator('#lanes li[data-attempt="2"][data-provider="sim-fallback"][data-state="succeeded"][data-winner="true"]').waitFor();
  await page.locator('#job-status[data-status="succeeded"]').waitFor();
  const shown = await lanes(page);
  assert.deepEqual(shown.map((l) => [l.attempt, l.provider, l.state, l.role, l.winner]), [
    [1, "sim-primary", "failed", "first", false],
    [2, "sim-fallback", "succeeded", "fallback", true],
  ]);
  assert.ok(shown[0].badges.length === 0 && shown[1].badges.includes("fallback") && shown[1].badges.includes("winner"));
  assert.ok(shown[1].left >= shown[0].left + shown[0].width - 0.5, "the fallback starts after the resolution");
  assert.notEqual(shown[0].colour, shown[1].colour, "failed and succeeded are coloured apart");
  // The resolution as recorded, and usage per attempt and summed.
  assert.match(await page.textContent('#attempts tr[data-attempt="1"]'), /never ran/);
  await page.locator('#job-usage[data-source="job"]').waitFor();
  assert.match(await page.textContent('#attempts tr[data-attempt="2"] [data-usage="tokens"]'), /^\d[\d,]* \/ \d[\d,]*$/);
  console.log("screenshot:", await screenshot(page, "console-resolved-fallback"));

  const job = await owner.getJob(id);
  assert.equal(job.status, "succeeded");
  assert.equal(job.completed_by, 2);
  // No longer blocked: the list refreshed after the resolution.
  await page.locator(`#blocked tr[data-job-id="${id}"]`).waitFor({ state: "detached" });
  assert.deepEqual(errors, []);
  assert.deepEqual(await violations(), []);
  await context.close();
});

test("a hedged job: two lanes, the hedge badged, the winner highlighted, the loser discarded", async () => {
  const { job } = await owner.submit("console-hedge",
    demo({ "sim-primary": { latency_ms: 1500 }, "sim-fallback": { latency_ms: 100 } }, "demo-hedge"));
  const { context, page, errors, violations } = await openConsole();
  await page.fill("#find-id", job.id);
  await page.click("#find-open");
  // Followed live: the hedge wins at about 0.6 s, the primary answers at
  // 1.5 s and is discarded.
  await page.locator('#lanes li[data-attempt="2"][data-state="succeeded"]').waitFor();
  await page.locator('#lanes li[data-attempt="1"][data-state="discarded"]').waitFor();
  const shown = await lanes(page);
  console.log("hedged timeline:", JSON.stringify(shown, null, 1));
  assert.equal(shown.length, 2, "one lane per attempt");
  const [primary, hedge] = shown;
  assert.deepEqual([primary.provider, primary.state, primary.hedge, primary.winner, primary.badges], ["sim-primary", "discarded", false, false, []]);
  assert.deepEqual([hedge.provider, hedge.state, hedge.hedge, hedge.winner, hedge.role], ["sim-fallback", "succeeded", true, true, "hedge"]);
  assert.deepEqual(hedge.badges, ["hedge", "winner"]);
  assert.ok(hedge.left > primary.left, "the hedge starts after the primary (its hedge delay)");
  assert.ok(primary.width > 3 * hedge.width, "the primary ran far longer than the hedge");
  assert.ok(hedge.left + hedge.width < primary.left + primary.width, "the hedge finished first");
  assert.equal(await page.getAttribute('#lanes li[data-winner="true"]', "data-attempt"), "2");
  assert.match(await page.textContent('#job-fields [data-field="completed by"]'), /attempt 2 \(sim-fallback\)/);
  assert.equal(await page.textContent('#job-fields [data-field="tier"]'), "now", "a job that names no tier waits now");
  assert.match(await page.textContent('#attempts tr[data-attempt="1"]'), /lost_race/);
  // Over, so no longer listed as open.
  await page.locator(`#open tr[data-job-id="${job.id}"]`).waitFor({ state: "detached" });
  console.log("screenshot:", await screenshot(page, "console-hedge"));
  assert.deepEqual(errors, []);
  assert.deepEqual(await violations(), []);
  await context.close();
});

test("a job's trace: every function's spans, each under its parent, in the client's trace, with no collector", async () => {
  const traceID = "4bf92f3577b34da6a3ce929d0e0e4736";
  const clientSpan = "00f067aa0ba902b7";
  const traced = new OnejobClient({ baseUrl: stack.apiUrl, token: await stack.token("console-user"),
    traceparent: () => `00-${traceID}-${clientSpan}-01` });
  // The primary fails, the fallback answers: two attempts, two provider calls.
  const { job } = await traced.submit("console-trace", demo({ "sim-primary": { outcome: "error" } }));
  await untilStatus(job.id, "succeeded");
  const { context, page, errors, violations } = await openConsole();
  await page.fill("#find-id", job.id);
  await page.click("#find-open");
  await page.locator('#job[data-status="succeeded"]').waitFor();
  // Spans are exported in batches: read the trace again until the api's
  // create, the run function's run and the fallback's call are all in.
  const deadline = Date.now() + 60_000;
  const shown = () => page.$$eval("#trace-spans li.span", (lis) => lis.map((li) => ({
    id: li.dataset.span, parent: li.dataset.parent, name: li.dataset.name, service: li.dataset.service, kind: li.dataset.kind,
    depth: Number(li.dataset.depth), error: li.dataset.error === "true", label: li.getAttribute("aria-label"),
    left: parseFloat(li.querySelector(".bar").style.left), width: parseFloat(li.querySelector(".bar").style.width),
  })));
  let spans = await shown();
  const complete = (all) => all.some((sp) => sp.name === "create") && all.some((sp) => sp.name === "run") &&
    all.filter((sp) => sp.kind === "client" && sp.service === "onejob-run").length >= 2;
  while (!complete(spans)) {
    assert.ok(Date.now() < deadline, `the trace never showed the create, a run and both calls: ${JSON.stringify(spans)}`);
    await Promise.all([page.waitForResponse((r) => r.url().endsWith(`/v1/jobs/${job.id}/trace`)), page.click("#trace-refresh")]);
    spans = await shown();
  }
  console.log("trace:", spans.map((sp) => `${"  ".repeat(sp.depth)}${sp.name} (${sp.service})`).join("\n"));
  assert.equal(await page.getAttribute("#trace", "data-trace-id"), traceID, "the job's trace is the client's");
  const ids = new Set(spans.map((sp) => sp.id));
  const create = spans.find((sp) => sp.name === "create");
  assert.deepEqual([create.parent, create.depth, create.service], [clientSpan, 0, "onejob-api"], "the create is the client's span's child");
  for (const sp of spans.filter((x) => x !== create)) {
    assert.ok(ids.has(sp.parent), `span ${sp.name} (${sp.service}) hangs under a span not in the trace: ${sp.parent}`);
    const parent = spans.find((x) => x.id === sp.parent);
    assert.equal(sp.depth, parent.depth + 1, `${sp.name} is drawn under its parent ${parent.name}`);
    assert.ok(sp.left >= 0 && sp.left + sp.width <= 100.0001, `${sp.name}'s bar is on the axis: ${sp.left} + ${sp.width}`);
  }
  const calls = spans.filter((sp) => sp.kind === "client" && sp.service === "onejob-run");
  assert.ok(calls.some((c) => c.error) && calls.some((c) => !c.error), "the primary's call failed, the fallback's did not");
  console.log("screenshot:", await screenshot(page, "console-trace"));
  assert.deepEqual(errors, []);
  assert.deepEqual(await violations(), []);
  await context.close();
});

test("cancelling needs a reason and a confirmation", async () => {
  const { job } = await owner.submit("console-cancel", timesOut);
  await untilStatus(job.id, "unknown");
  const { context, page, errors } = await openConsole(`${stack.consoleUrl}&job=${job.id}`);
  await page.locator('#lanes li[data-attempt="1"][data-state="unknown"]').waitFor();
  await page.click("#cancel-open");
  await page.click("#cancel-review");
  assert.equal(await page.getAttribute("#cancel-reason", "aria-invalid"), "true");
  assert.equal(await page.isVisible("#cancel-confirm"), false);
  await page.fill("#cancel-reason", "the customer withdrew the request");
  await page.click("#cancel-review");
  await page.locator("#cancel-confirm").waitFor();
  await page.click("#cancel-confirm-button");
  await page.locator('#job-status[data-status="cancelled"]').waitFor();
  assert.equal((await owner.getJob(job.id)).status, "cancelled");
  assert.equal(await page.isVisible("#cancel-open"), false, "nothing left to cancel");
  console.log("screenshot:", await screenshot(page, "console-cancelled"));
  assert.deepEqual(errors, []);
  await context.close();
});

test("problems are shown as the API states them: a lost resolution, a result that breaks the contract, a user's token", async () => {
  const { job } = await owner.submit("console-problems", timesOut);
  await untilStatus(job.id, "unknown");
  const { context, page, errors } = await openConsole(`${stack.consoleUrl}&job=${job.id}`);
  await page.locator('#lanes li[data-attempt="1"][data-state="unknown"]').waitFor();

  // A result the job type's contract refuses: 422 with errors[].
  await page.click('button[data-resolve="1"]');
  await page.check('input[name="outcome"][value="succeeded"]');
  await page.fill("#resolve-result", '{"unexpected": true}');
  await page.fill("#resolve-reason", "the provider's dashboard shows this answer");
  await page.click("#resolve-review");
  await page.click("#resolve-confirm-button");
  const problem = page.locator('#problem[data-status="422"]');
  await problem.waitFor();
  assert.equal(await problem.getAttribute("data-type"), "https://onejob.dev/problems/result-violates-contract");
  assert.ok(await page.locator("#problem-errors li").count() >= 1, "errors[] listed");
  assert.match(await page.textContent('#problem-fields [data-member="request_id"]'), /\S/);
  assert.equal(await page.getAttribute("#resolve-result", "aria-invalid"), "true", "the result's errors are shown at the field");
  console.log("screenshot:", await screenshot(page, "console-problem-422"));

  // Someone else resolves it first: 409 with the attempt's state now.
  const other = await fetch(`${stack.apiUrl}/v1/jobs/${job.id}/attempts/1/resolve`, {
    method: "POST", headers: { Authorization: `Bearer ${await stack.token("other-operator", "jobs:admin")}`, "Content-Type": "application/json" },
    body: JSON.stringify({ outcome: "cancelled", reason: "resolved elsewhere first" }),
  });
  assert.equal(other.status, 200);
  await page.fill("#resolve-result", "");
  await page.check('input[name="outcome"][value="failed"]');
  await page.click("#resolve-review");
  await page.click("#resolve-confirm-button");
  const conflict = page.locator('#problem[data-status="409"]');
  await conflict.waitFor();
  assert.equal(await conflict.getAttribute("data-type"), "https://onejob.dev/problems/resolution-conflict");
  assert.match(await page.textContent('#problem-fields [data-member="attempt_state"]'), /cancelled/);
  console.log("screenshot:", await screenshot(page, "console-problem-409"));

  // A user's token pasted in: the operator's listing is forbidden.
  await page.fill("#token", await stack.token("console-user"));
  await page.click("#use-token");
  await page.locator('#problem[data-status="403"]').waitFor();
  await page.locator('#who[data-admin="false"]').waitFor();
  assert.match(await page.textContent("#who"), /^console-user, expires .* · not an operator here/);
  assert.equal(await page.getAttribute("#problem", "data-type"), "https://onejob.dev/problems/forbidden");

  // The page runs no inline script, whatever gets into the DOM.
  await page.evaluate(() => {
    const s = document.createElement("script");
    s.textContent = "window.injected = true";
    document.body.append(s);
  });
  await page.waitForFunction(() => window.cspViolations.some((v) => v.startsWith("script-src")));
  assert.equal(await page.evaluate(() => window.injected), undefined, "the inline script did not run");
  assert.deepEqual(errors, []);
  await context.close();
});

test("provider health: every provider's breaker; one forced open with a reason, shown with who and why, then cleared", async () => {
  // The stack runs with breakers that never open by themselves (--breakers
  // off), but an operator's override is honoured as always. The provider
  // forced is one no demo job uses.
  const name = "anthropic-fallback";
  const { context, page, errors, violations } = await openConsole();
  const row = page.locator(`#provider-table tr[data-provider="${name}"]`);
  await row.waitFor();
  const shown = await page.$$eval("#provider-table tbody tr", (trs) => trs.map((tr) => [tr.dataset.provider, tr.dataset.state]));
  assert.deepEqual(shown, [["anthropic-fallback", "closed"], ["openai-primary", "closed"], ["sim-async", "closed"], ["sim-batch-anthropic", "closed"],
    ["sim-batch-openai", "closed"], ["sim-fallback", "closed"], ["sim-flex", "closed"], ["sim-hook-async", "closed"], ["sim-primary", "closed"]]);
  assert.match(await row.locator('[data-field="counts"]').textContent(), /^\d+ held, \d+ probes?, opened \d+ times?$/);

  // Forcing needs a reason, then a confirmation that says what it does.
  await row.locator('button[data-force="open"]').click();
  assert.equal(await page.textContent("#force-title"), `Force ${name} open`);
  await page.click("#force-review");
  assert.equal(await page.getAttribute("#force-reason", "aria-invalid"), "true");
  assert.equal(await page.isVisible("#force-confirm"), false, "no confirmation without a reason");
  await page.fill("#force-reason", "status page: elevated errors");
  await page.click("#force-review");
  await page.locator("#force-confirm").waitFor();
  assert.match(await page.textContent("#force-summary"), /^Force anthropic-fallback open, because: “status page: elevated errors”\. No new attempt goes to it/);
  await page.click("#force-confirm-button");
  await page.locator(`#provider-table tr[data-provider="${name}"][data-state="open"][data-forced="open"]`).waitFor();
  assert.match(await row.locator('[data-field="override"]').textContent(), /^forced open by operator at 20\S+Z: status page: elevated errors$/);
  assert.match(await row.locator('[data-field="why"]').textContent(), /its breaker alone: closed/);
  assert.deepEqual(await row.locator("button[data-force]").evaluateAll((bs) => bs.map((b) => b.dataset.force)), ["closed", "auto"]);
  // The API says the same.
  const api = await (await fetch(`${stack.apiUrl}/v1/admin/providers`, { headers: { Authorization: `Bearer ${await stack.token("reader", "jobs:admin")}` } })).json();
  assert.deepEqual(api.providers.find((p) => p.name === name).forced?.reason, "status page: elevated errors");
  console.log("screenshot:", await screenshot(page, "console-provider-forced"));

  await row.locator('button[data-force="auto"]').click();
  await page.fill("#force-reason", "incident over");
  await page.click("#force-review");
  await page.click("#force-confirm-button");
  await page.locator(`#provider-table tr[data-provider="${name}"][data-state="closed"][data-forced=""]`).waitFor();
  assert.deepEqual(errors, []);
  assert.deepEqual(await violations(), []);
  await context.close();
});

test("an incident: blocked jobs grouped by provider; a bulk resolution counted, given a reason, confirmed, its result shown", async () => {
  const from = new Date(Date.now() - 1000).toISOString();
  // Two jobs blocked on sim-primary, one on sim-fallback (its first provider here).
  const submitted = await Promise.all([
    owner.submit("console-bulk-1", timesOut), owner.submit("console-bulk-2", timesOut),
    owner.submit("console-bulk-3", { ...demo({ "sim-fallback": { outcome: "timeout" } }), providers: ["sim-fallback", "sim-primary"] }),
  ]);
  const ids = submitted.map((r) => r.job.id);
  await Promise.all(ids.map((id) => untilStatus(id, "unknown")));

  const { context, page, errors, violations } = await openConsole();
  const primary = page.locator('#blocked tbody[data-provider="sim-primary"]');
  await primary.locator(`tr[data-job-id="${ids[1]}"]`).waitFor();
  await page.locator(`#blocked tbody[data-provider="sim-fallback"] tr[data-job-id="${ids[2]}"]`).waitFor();
  assert.match(await primary.locator("tr.group-head").textContent(), /^sim-primary · 2 blocked · unknown since .* or later/);
  console.log("screenshot:", await screenshot(page, "console-blocked-by-provider"));

  // From the group: the provider and its earliest unknown attempt fill the selection.
  await primary.locator("button[data-bulk-provider]").click();
  assert.equal(await page.inputValue("#bulk-provider"), "sim-primary");
  assert.ok(await page.inputValue("#bulk-from") >= from.slice(0, 19), "from the group's earliest unknown attempt");
  await page.fill("#bulk-from", from); // this test's window: the other tests' attempts are older
  await page.fill("#bulk-to", "not a time");
  await page.click("#bulk-count");
  assert.equal(await page.getAttribute("#bulk-to", "aria-invalid"), "true");
  await page.fill("#bulk-to", "");
  await page.click("#bulk-count");

  // The dry run: the count first, each attempt listed, nothing changed.
  await page.locator('#bulk-count-text[data-matched="2"]').waitFor();
  assert.match(await page.textContent("#bulk-count-text"), /^2 unknown attempts of sim-primary unknown since \S+ \(\d+ open jobs? read\)\. Nothing has changed yet\.$/);
  assert.deepEqual(await page.$$eval("#bulk-attempts tbody tr", (trs) => trs.map((tr) => tr.dataset.result)), ["would_resolve", "would_resolve"]);
  assert.equal((await owner.getJob(ids[0])).status, "unknown");
  assert.equal(await page.isDisabled("#bulk-provider"), true, "the selection is fixed once counted");

  // A reason is required, then a confirmation says what will happen.
  await page.click("#bulk-review");
  assert.equal(await page.getAttribute("#bulk-reason", "aria-invalid"), "true");
  assert.equal(await page.isVisible("#bulk-confirm"), false);
  await page.fill("#bulk-reason", "sim-primary hung 12:00-12:05; its status page says nothing ran");
  await page.click("#bulk-review");
  await page.locator("#bulk-confirm").waitFor();
  assert.match(await page.textContent("#bulk-summary"), /^Resolve the 2 unknown attempts of sim-primary unknown since \S+ as failed, because: “sim-primary hung.*This cannot be undone\.$/);
  console.log("screenshot:", await screenshot(page, "console-bulk-confirm"));
  await page.click("#bulk-confirm-button");

  // The result; each job goes on with its fallback, and leaves the blocked list.
  await page.locator('#bulk-result[data-resolved="2"][data-conflicts="0"]').waitFor();
  assert.match(await page.textContent("#bulk-result"), /^Resolved 2 of 2 unknown attempts of sim-primary as failed; 0 conflicts/);
  assert.deepEqual(await page.$$eval("#bulk-attempts tbody tr", (trs) => trs.map((tr) => tr.dataset.result)), ["resolved", "resolved"]);
  for (const id of ids.slice(0, 2)) {
    const job = await untilStatus(id, "succeeded");
    assert.equal(job.completed_by, 2);
  }
  const [attempt] = (await owner.attempts(ids[0])).attempts;
  assert.equal(attempt.resolution?.outcome, "failed");
  await page.locator('#blocked tbody[data-provider="sim-primary"]').waitFor({ state: "detached" });
  await page.locator(`#blocked tbody[data-provider="sim-fallback"] tr[data-job-id="${ids[2]}"]`).waitFor();
  console.log("screenshot:", await screenshot(page, "console-bulk-done"));
  assert.deepEqual(errors, []);
  assert.deepEqual(await violations(), []);
  await context.close();

  // The job left blocked on sim-fallback is another incident's: cancelled here.
  const cancelled = await fetch(`${stack.apiUrl}/v1/jobs/${ids[2]}/cancel`, {
    method: "POST", headers: { Authorization: `Bearer ${await stack.token("console-user")}`, "Content-Type": "application/json" },
    body: JSON.stringify({ reason: "test over" }),
  });
  assert.equal(cancelled.status, 200);
});

test("a running streamed job: its answer forms in the job's view, read from its stream at another origin, to its end", async () => {
  // About 120 tokens at 40 a second: three seconds of answer, from
  // whichever provider runs it (the tests before may leave sim-primary's
  // breaker open).
  const prompt = Array.from({ length: 120 }, (_, i) => "abcdefghijklmnopqrstuvwxyz"[i % 26].repeat(1 + Math.floor(i / 26))).join(" ");
  const pace = { first_token_ms: 300, tokens_per_second: 40 };
  const { job } = await owner.submit("console-stream", { type: "demo-stream", stream: true,
    input: { prompt, simulate: { "sim-primary": pace, "sim-fallback": pace } } });
  const { context, page, errors, violations, response } = await openConsole(`${stack.consoleUrl}&job=${job.id}`);
  // The policy lets the page read streams where they are served, and nowhere else.
  const streams = new URL(job.stream_url).origin;
  assert.notEqual(streams, new URL(page.url()).origin, "streams are served at an origin of their own");
  assert.match(response.headers()["content-security-policy"], new RegExp(`connect-src 'self' ${streams};`));
  await page.locator("#job-stream:not([hidden])").waitFor();
  const text = '#job-stream-attempts li[data-attempt="1"] .stream-text';
  // The first deltas may carry the provider's name alone: wait for the
  // prompt's first word.
  await page.waitForFunction((sel) => /^sim-(primary|fallback) answered: a/.test(document.querySelector(sel)?.textContent ?? ""), text);
  const early = await page.textContent(text);
  assert.equal((await owner.getJob(job.id)).status, "running", "the text shows while the job runs");
  assert.equal(await page.getAttribute("#job-stream", "data-final"), null);
  console.log("screenshot:", await screenshot(page, "console-stream-forming"));
  await page.locator('#job-stream[data-final="succeeded"]').waitFor({ timeout: 30_000 });
  const done = await owner.getJob(job.id);
  assert.equal(await page.textContent(text), done.result.text, "the deltas built the answer, nothing repeated or missing");
  assert.ok(early.length < done.result.text.length);
  await page.locator('#job-status[data-status="succeeded"]').waitFor();
  console.log("screenshot:", await screenshot(page, "console-stream-done"));
  assert.deepEqual(await violations(), []);
  assert.deepEqual(errors, []);
  await context.close();
});
