// @ts-check
// The console's incidents: an incident's unknown attempts resolved in bulk
// (a provider and a window, a dry-run count, a reason, a confirmation, the
// result).

import { groupBlocked } from "./jobs.mjs";
import { ApiError, dateTime, el } from "./page.mjs";

/** @typedef {import("./page.mjs").BulkAttempt} BulkAttempt */
/** @typedef {import("./page.mjs").BulkResult} BulkResult */
/** @typedef {import("./page.mjs").Page} Page */

const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/i;

/**
 * A bulk resolution's window, as typed: each end an RFC 3339 time (sent as
 * typed, so no precision is lost) or empty (open); from before to.
 * @param {string} from
 * @param {string} to
 * @returns {{from: string, to: string, errors: {from?: string, to?: string}}}
 */
export function parseWindow(from, to) {
  /** @type {{from?: string, to?: string}} */
  const errors = {};
  const f = from.trim(), t = to.trim();
  for (const [k, v] of /** @type {const} */ ([["from", f], ["to", t]])) {
    if (v && (!RFC3339.test(v) || !Number.isFinite(Date.parse(v)))) {
      errors[k] = "An RFC 3339 time with its zone, e.g. 2026-12-02T01:00:00Z, or empty.";
    }
  }
  if (f && t && !errors.from && !errors.to && Date.parse(f) >= Date.parse(t)) {
    errors.to = "Must be after the start of the window.";
  }
  return { from: f, to: t, errors };
}

/**
 * The answers to one bulk resolution, request after request (next_cursor),
 * summed; at most max attempts kept for display.
 * @param {BulkResult[]} pages
 * @param {number} [max]
 * @returns {BulkResult & {listed: number}}
 */
export function sumBulk(pages, max = 200) {
  /** @type {BulkAttempt[]} */
  const attempts = pages.flatMap((p) => p.attempts ?? []).slice(0, max);
  const sum = (/** @type {(p: BulkResult) => number} */ f) => pages.reduce((n, p) => n + (f(p) ?? 0), 0);
  return {
    dry_run: pages.every((p) => p.dry_run), matched: sum((p) => p.matched), resolved: sum((p) => p.resolved),
    conflicts: sum((p) => p.conflicts), scanned: sum((p) => p.scanned), attempts, listed: attempts.length,
  };
}

/**
 * Wires the bulk resolution.
 * @param {Page} page
 */
export function wireIncidents(page) {
  const { doc, state, $, input, area, button, form, select, fieldset, say, showProblem, clearProblem, fieldError, api } = page;
  // Calls into the other parts of the page (bound by boot once every part is wired).
  const refreshQueues = (/** @type {{more?: string}} */ o = {}) => page.calls.refreshQueues(o);
  const refreshProviders = () => page.calls.refreshProviders();
  const reloadOpen = () => page.calls.reloadOpen();

  /** The API wants a reason on a dry run too; it records nothing but a log line. */
  const DRY_RUN_REASON = "console: counting before resolving (dry run)";

  /** @type {{provider: string, from: string, to: string, counted: number} | null} */
  let bulkSelection = null;
  /** @type {{outcome: string, reason: string} | null} */
  let bulkDecision = null;

  /** @param {"select" | "counted" | "confirm" | "done"} step */
  function bulkStep(step) {
    form("bulk-form").dataset.step = step;
    fieldset("bulk-select").disabled = step !== "select";
    $("bulk-counted").hidden = step !== "counted" && step !== "confirm";
    $("bulk-decide").hidden = step !== "counted";
    $("bulk-confirm").hidden = step !== "confirm";
    $("bulk-done").hidden = step !== "done";
    if (step === "select") {
      bulkSelection = null;
      bulkDecision = null;
      renderBulkAttempts(null);
    }
  }

  /** The bulk form's providers: every provider listed, and every one a blocked job waits on. */
  function syncBulkProviders() {
    const sel = select("bulk-provider");
    const chosen = sel.value;
    const names = new Set(state.providers.map((p) => p.name));
    for (const g of groupBlocked(state.queues.blocked?.jobs ?? [])) {
      if (g.provider) {
        names.add(g.provider);
      }
    }
    sel.replaceChildren(...[...names].sort().map((n) => el(doc, "option", { text: n, attrs: { value: n } })));
    if (names.has(chosen)) {
      sel.value = chosen;
    }
  }

  /**
   * Starts a bulk resolution of a group of blocked jobs: its provider, from
   * the earliest of them.
   * @param {string} provider
   * @param {string} since
   */
  function prefillBulk(provider, since) {
    bulkStep("select");
    syncBulkProviders();
    select("bulk-provider").value = provider;
    input("bulk-from").value = since;
    input("bulk-to").value = "";
    fieldError("bulk-from", "");
    fieldError("bulk-to", "");
    $("bulk-title").scrollIntoView({ block: "nearest" });
    button("bulk-count").focus();
  }

  /**
   * Sends one bulk resolution, request after request until no next_cursor.
   * What came back before an error is returned with it.
   * @param {Record<string, unknown>} body
   * @returns {Promise<{result: (BulkResult & {listed: number}) | null, error: unknown}>}
   */
  async function bulkRun(body) {
    /** @type {BulkResult[]} */
    const pages = [];
    const seen = new Set();
    let cursor = "";
    try {
      for (let i = 0; i < 100; i++) {
        const page = (await api("POST", "v1/admin/attempts/resolve", { body: cursor ? { ...body, cursor } : body })).body;
        pages.push(page);
        cursor = page?.next_cursor ?? "";
        if (!cursor || seen.has(cursor)) {
          break;
        }
        seen.add(cursor);
      }
    } catch (err) {
      return { result: pages.length > 0 ? sumBulk(pages) : null, error: err };
    }
    return { result: sumBulk(pages), error: null };
  }

  /** @param {{provider: string, from: string, to: string}} s */
  function windowText(s) {
    return s.from || s.to ? `unknown since ${s.from || "any time"}${s.to ? ` and before ${s.to}` : ""}` : "unknown at any time";
  }

  /** @param {(BulkResult & {listed: number}) | null} r */
  function renderBulkAttempts(r) {
    const table = $("bulk-attempts");
    const attempts = r?.attempts ?? [];
    table.dataset.count = String(attempts.length);
    table.querySelector("tbody")?.replaceChildren(...attempts.map((a) =>
      el(doc, "tr", { attrs: { "data-job-id": a.job_id, "data-attempt": String(a.attempt), "data-result": a.result.split(":")[0] ?? "" } }, [
        el(doc, "td", { cls: "mono", text: a.job_id }),
        el(doc, "td", { cls: "num", text: String(a.attempt) }),
        el(doc, "td", { cls: "mono", text: a.owner }),
        el(doc, "td", { cls: "num", text: dateTime(a.unknown_since) }),
        el(doc, "td", { text: a.result }),
      ])));
    const more = r ? r.matched - r.listed : 0;
    $("bulk-more").hidden = more <= 0;
    $("bulk-more").textContent = more > 0 ? `${more} more not listed here.` : "";
  }

  /** @param {number} n */
  const attemptsText = (n) => `${n} unknown attempt${n === 1 ? "" : "s"}`;

  form("bulk-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    if (form("bulk-form").dataset.step !== "select") {
      return;
    }
    const provider = select("bulk-provider").value;
    const w = parseWindow(input("bulk-from").value, input("bulk-to").value);
    fieldError("bulk-from", w.errors.from ?? "");
    fieldError("bulk-to", w.errors.to ?? "");
    if (w.errors.from || w.errors.to) {
      input(w.errors.from ? "bulk-from" : "bulk-to").focus();
      return;
    }
    if (!provider) {
      showProblem(new ApiError({ title: "No provider", detail: "no provider is listed yet: refresh the provider health" }), "Counting unknown attempts");
      return;
    }
    const b = button("bulk-count");
    b.disabled = true;
    /** @type {Record<string, unknown>} */
    const body = { provider, outcome: "failed", reason: DRY_RUN_REASON, dry_run: true };
    if (w.from) {
      body.unknown_since_from = w.from;
    }
    if (w.to) {
      body.unknown_since_to = w.to;
    }
    const { result, error } = await bulkRun(body);
    b.disabled = false;
    if (error || !result) {
      showProblem(error, `Counting the unknown attempts of ${provider}`);
      return;
    }
    clearProblem();
    bulkSelection = { provider, from: w.from, to: w.to, counted: result.matched };
    renderBulkAttempts(result);
    const text = $("bulk-count-text");
    text.dataset.matched = String(result.matched);
    text.textContent = `${attemptsText(result.matched)} of ${provider} ${windowText(bulkSelection)} ` +
      `(${result.scanned} open job${result.scanned === 1 ? "" : "s"} read). Nothing has changed yet.`;
    button("bulk-review").disabled = result.matched === 0;
    bulkStep("counted");
    say(`Counted ${attemptsText(result.matched)} of ${provider}.`);
    if (result.matched > 0) {
      area("bulk-reason").focus();
    } else {
      button("bulk-reset").focus();
    }
  });

  button("bulk-review").addEventListener("click", () => {
    const s = bulkSelection;
    const reason = area("bulk-reason").value.trim();
    fieldError("bulk-reason", reason ? "" : "Say why: the reason is recorded with each resolution.");
    if (!s || !reason) {
      area("bulk-reason").focus();
      return;
    }
    const checked = form("bulk-form").querySelector('input[name="bulk-outcome"]:checked');
    const outcome = checked instanceof HTMLInputElement ? checked.value : "failed";
    bulkDecision = { outcome, reason };
    $("bulk-summary").textContent = `Resolve the ${attemptsText(s.counted)} of ${s.provider} ${windowText(s)} as ${outcome}, ` +
      `because: “${reason}”. Each is its own write, kept with who, when and why; one that ended or was resolved since the count ` +
      `is left as it is. ${outcome === "failed" ? "Each job then goes on with its next provider, if one is left." : "Each job is then cancelled."} ` +
      "This cannot be undone.";
    bulkStep("confirm");
    button("bulk-confirm-button").focus();
  });
  button("bulk-back").addEventListener("click", () => {
    bulkStep("counted");
    area("bulk-reason").focus();
  });
  for (const id of ["bulk-reset", "bulk-again"]) {
    button(id).addEventListener("click", () => {
      bulkStep("select");
      select("bulk-provider").focus();
    });
  }
  button("bulk-confirm-button").addEventListener("click", async () => {
    const s = bulkSelection;
    const d = bulkDecision;
    if (!s || !d) {
      return;
    }
    const b = button("bulk-confirm-button");
    b.disabled = true;
    /** @type {Record<string, unknown>} */
    const body = { provider: s.provider, outcome: d.outcome, reason: d.reason, dry_run: false };
    if (s.from) {
      body.unknown_since_from = s.from;
    }
    if (s.to) {
      body.unknown_since_to = s.to;
    }
    const { result, error } = await bulkRun(body);
    b.disabled = false;
    if (result) {
      renderBulkAttempts(result);
      const text = $("bulk-result");
      text.dataset.resolved = String(result.resolved);
      text.dataset.conflicts = String(result.conflicts);
      text.textContent = `Resolved ${result.resolved} of ${attemptsText(result.matched)} of ${s.provider} as ${d.outcome}; ` +
        `${result.conflicts} conflict${result.conflicts === 1 ? "" : "s"} (ended or resolved meanwhile, left as they were)` +
        `${result.matched !== s.counted ? `; the count said ${s.counted}: attempts changed in between` : ""}.` +
        `${error ? " Then the API failed: the same selection resolves the rest." : ""}`;
      bulkStep("done");
      say(`Resolved ${result.resolved} unknown attempt${result.resolved === 1 ? "" : "s"} of ${s.provider} as ${d.outcome}.`);
    }
    if (error) {
      const problem = showProblem(error, `Resolving the unknown attempts of ${s.provider}`);
      if (!result) {
        bulkStep("counted");
        fieldError("bulk-reason", (problem.errors ?? []).filter((e) => e.pointer === "/reason").map((e) => e.detail ?? "").join("; "));
      }
    } else {
      clearProblem();
    }
    void refreshQueues();
    void refreshProviders();
    if (state.open) {
      void reloadOpen();
    }
  });
  bulkStep("select");

  return { syncBulkProviders, prefillBulk };
}
