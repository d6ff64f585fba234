// @ts-check
// The operator console: shows each provider's health and forces one open or
// closed; lists the blocked jobs (grouped by the provider they wait on) and
// the other open jobs; resolves an incident's unknown attempts in bulk
// (provider and window, a dry-run count, a reason, a confirmation); opens a
// job, draws its attempts on a timeline with their usage, and resolves an
// unknown attempt or cancels a job, each with a required reason and a
// confirmation. It talks only to the public API, same-origin, with the
// operator's token: pasted into the page, or carried in the fragment
// (/console#token=…), which is read once and removed from the address bar.
// The token lives in this tab's memory only.
//
// The page is wired in parts, one module each: the lists of jobs
// (jobs.mjs), one job (job.mjs), its answer as it forms (stream.mjs) and
// what an operator does to it (job-actions.mjs), the provider health (providers.mjs), an incident's
// bulk resolution (incidents.mjs), on what they share (page.mjs: the API,
// problems, elements). This module is the entry the page loads: the token
// and the start. The pure functions (tested under Node) are exported here;
// boot() wires the page and runs only in a browser.

import { wireIncidents } from "./incidents.mjs";
import { wireJobActions } from "./job-actions.mjs";
import { wireJob } from "./job.mjs";
import { wireJobs } from "./jobs.mjs";
import { newPage } from "./page.mjs";
import { wireProviders } from "./providers.mjs";
import { wireTrace } from "./trace.mjs";
import { wireStream } from "./stream.mjs";

export { parseWindow, sumBulk } from "./incidents.mjs";
export { ATTEMPT_STATES, attemptRoles, layoutTimeline, remoteLines, sumUsage } from "./job.mjs";
export { groupBlocked, oldestFirst } from "./jobs.mjs";
export { ApiError, formatDuration, problemFields, problemFrom } from "./page.mjs";
export { describeProvider } from "./providers.mjs";
export { layoutSpans } from "./trace.mjs";
export { SSEParser, applyStreamEvent } from "./stream.mjs";

/** @typedef {import("./page.mjs").Calls} Calls */

/**
 * Reads the fragment: the token (and a job to open) out, everything else
 * kept, so the caller can put the rest back into the address bar.
 * @param {string} hash location.hash, with or without its "#"
 * @returns {{token: string, job: string, rest: string}}
 */
export function readFragment(hash) {
  const params = new URLSearchParams(hash.replace(/^#/, ""));
  const token = (params.get("token") ?? "").trim();
  const job = (params.get("job") ?? "").trim();
  params.delete("token");
  params.delete("job");
  return { token, job, rest: params.toString() };
}

/**
 * The claims of a JWT, decoded without verifying it (the API verifies): for
 * showing who the token is, never for deciding anything.
 * @param {string} token
 * @returns {{sub: string, scopes: string[], exp: number | null} | null}
 */
export function decodeClaims(token) {
  const part = token.split(".")[1];
  if (!part) {
    return null;
  }
  try {
    const b64 = part.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(part.length / 4) * 4, "=");
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const claims = JSON.parse(new TextDecoder().decode(bytes));
    if (typeof claims !== "object" || claims === null) {
      return null;
    }
    const scope = claims.scope;
    const scopes = Array.isArray(scope) ? scope.map(String) : typeof scope === "string" ? scope.split(/\s+/).filter(Boolean) : [];
    return { sub: String(claims.sub ?? ""), scopes, exp: typeof claims.exp === "number" ? claims.exp : null };
  } catch {
    return null;
  }
}

/**
 * Wires the page: each part, then the token and the start.
 * @param {Document} doc
 * @param {Window} win
 */
export function boot(doc, win) {
  const page = newPage(doc, win);
  const { state, $, input, button, form, say, clearProblem } = page;
  /** @type {Calls} */
  const calls = {
    ...wireJobs(page), ...wireJob(page), ...wireJobActions(page), ...wireProviders(page), ...wireIncidents(page),
    ...wireTrace(page), ...wireStream(page), markOperator,
  };
  Object.assign(page.calls, calls);
  const { refreshQueues, renderQueue, openJob, closeJob, refreshProviders, renderProviders } = calls;

  // ---- the token ----

  /**
   * Takes a token. Who it names is read from it for display; whether it is
   * an operator's only the API says (the admin claim is the deployment's
   * choice), when the first admin listing answers.
   * @param {string} token
   */
  function useToken(token) {
    state.token = token;
    state.ownListing = false;
    const who = $("who");
    delete who.dataset.admin;
    if (!token) {
      who.textContent = "no token";
      return;
    }
    const c = decodeClaims(token);
    const exp = c?.exp ? `, expires ${new Date(c.exp * 1000).toISOString().replace("T", " ").slice(0, 16)}Z` : "";
    who.dataset.subject = c ? `${c.sub || "(no sub)"}${exp}` : "a token that is not a JWT";
    who.textContent = who.dataset.subject;
    say(`Token for ${c?.sub || "an unnamed subject"} in use.`);
  }

  /**
   * What the API said about the token: an operator's, or not.
   * @param {boolean} operator
   */
  function markOperator(operator) {
    const who = $("who");
    who.dataset.admin = String(operator);
    who.textContent = `${who.dataset.subject ?? ""} · ${operator ? "operator" : "not an operator here (the API refused the admin listing)"}`;
  }

  form("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = input("token").value.trim().replace(/^Bearer\s+/i, "");
    input("token").value = "";
    if (!t) {
      return;
    }
    useToken(t);
    clearProblem();
    void refreshQueues();
    void refreshProviders();
  });
  button("forget-token").addEventListener("click", () => {
    useToken("");
    closeJob();
    state.queues = {};
    for (const kind of ["blocked", "open"]) {
      renderQueue(kind, []);
    }
    state.providers = [];
    renderProviders();
    say("Token forgotten.");
  });
  $("problem-dismiss").addEventListener("click", clearProblem);

  // ---- start ----

  // The fragment's token is read once and taken out of the address bar
  // (and so out of the history and of anything copied from it).
  const frag = readFragment(win.location.hash);
  if (frag.token || frag.job) {
    win.history.replaceState(win.history.state, "", win.location.pathname + win.location.search + (frag.rest ? `#${frag.rest}` : ""));
  }
  useToken(frag.token);
  if (!frag.token) {
    say("Paste an operator token to start.");
  }
  // Lists refresh on their own; a hidden tab does not ask.
  setInterval(() => {
    if (state.token && doc.visibilityState === "visible") {
      void refreshQueues();
      void refreshProviders();
    }
  }, 15_000);
  void (async () => {
    await Promise.all([refreshQueues(), refreshProviders()]);
    if (frag.job) {
      input("find-id").value = frag.job;
      await openJob(frag.job);
    }
    doc.body.dataset.ready = "true";
  })();
}

if (typeof document !== "undefined" && typeof window !== "undefined") {
  boot(document, window);
}
