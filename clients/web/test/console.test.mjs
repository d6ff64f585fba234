// The operator console (internal/apigw/console, served by the API itself at
// /console) in a real browser against the real local stack: opened through
// the link `onejob run` prints (the admin token in its fragment), it finds a
// blocked job, resolves its unknown attempt with a reason and a
// confirmation and shows the fallback's success; it draws a hedged job's
// race; it cancels with a reason; it shows problem documents. Screenshots go
// to .local/screenshots/console-*.png.
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
  assert.match(await page.textContent('#attempts tr[data-attempt="1"]'), /lost_race/);
  // Over, so no longer listed as open.
  await page.locator(`#open tr[data-job-id="${job.id}"]`).waitFor({ state: "detached" });
  console.log("screenshot:", await screenshot(page, "console-hedge"));
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
