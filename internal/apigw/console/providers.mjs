// @ts-check
// The console's provider health: each breaker, why it is where it is, and
// an operator's override of it (forced open or closed, with a reason).

import { ApiError, dateTime, el } from "./page.mjs";

/** @typedef {import("./page.mjs").Provider} Provider */
/** @typedef {import("./page.mjs").Page} Page */

/** The failure kinds in the order operators read them (job.FailureKinds). */
const FAILURE_KINDS = ["unknown", "server_error", "transport", "rate_limited", "slow"];

/**
 * A provider's health for display: its state as attempts see it, why,
 * its window's failures, its counts, an override, and the overrides an
 * operator may set from here.
 * @param {Provider} p
 * @returns {{state: string, why: string, failures: string, counts: string, override: string,
 *   actions: ("open" | "closed" | "auto")[]}}
 */
export function describeProvider(p) {
  const f = p.failures ?? {};
  const kinds = Object.keys(f).sort((a, b) => {
    const ia = FAILURE_KINDS.indexOf(a), ib = FAILURE_KINDS.indexOf(b);
    return (ia < 0 ? FAILURE_KINDS.length : ia) - (ib < 0 ? FAILURE_KINDS.length : ib) || a.localeCompare(b);
  });
  const failures = kinds.filter((k) => (f[k] ?? 0) > 0).map((k) => `${f[k]} ${k}`).join(", ") || "none";
  const why = [p.reason ?? "",
    p.state === "open" && p.open_until && !p.forced ? `takes attempts again from ${p.open_until} (cooldown ${p.cooldown_seconds ?? 0} s, trip ${p.trips ?? 0})` : "",
    p.forced && p.breaker_state && p.breaker_state !== p.state ? `its breaker alone: ${p.breaker_state}` : "",
  ].filter(Boolean).join("; ");
  const plural = (/** @type {number} */ n, /** @type {string} */ w) => `${n} ${w}${n === 1 ? "" : "s"}`;
  // Overdue: cancelled jobs' calls past the provider's max_processing_time,
  // which no longer count against it (shown only when there are some).
  const overdue = (p.overdue ?? 0) > 0 ? `, ${p.overdue} overdue` : "";
  const counts = `${p.held ?? 0} held${overdue}, ${plural(p.probes ?? 0, "probe")}, opened ${plural(p.opened ?? 0, "time")}`;
  const override = p.forced ? `forced ${p.forced.state} by ${p.forced.by} at ${p.forced.at}: ${p.forced.reason}` : "";
  /** @type {("open" | "closed" | "auto")[]} */
  const actions = [];
  if (p.forced?.state !== "open") {
    actions.push("open");
  }
  if (p.forced?.state !== "closed") {
    actions.push("closed");
  }
  if (p.forced) {
    actions.push("auto");
  }
  return { state: p.state, why, failures, counts, override, actions };
}

/**
 * Wires the provider health.
 * @param {Page} page
 */
export function wireProviders(page) {
  const { doc, state, $, area, button, form, api, say, showProblem, clearProblem, fieldError } = page;
  // Calls into the other parts of the page (bound by boot once every part is wired).
  const syncBulkProviders = () => page.calls.syncBulkProviders();

  /** Reads every provider's health (GET /v1/admin/providers) and shows it. */
  async function refreshProviders() {
    if (!state.token) {
      return;
    }
    const empty = $("provider-table-empty");
    try {
      const body = (await api("GET", "v1/admin/providers")).body;
      state.providers = Array.isArray(body?.providers) ? body.providers : [];
      empty.textContent = "no providers";
    } catch (err) {
      state.providers = [];
      if (err instanceof ApiError && err.problem.status === 404) {
        empty.textContent = "this deployment keeps no provider health";
      } else {
        empty.textContent = "not read";
        showProblem(err, "Reading the providers' health");
      }
    }
    renderProviders();
    $("providers-updated").textContent = `updated ${new Date().toISOString().slice(11, 19)}Z`;
  }

  /** What forcing a provider does, said before it is done. */
  const FORCE_EFFECT = {
    open: "No new attempt goes to it until the override is cleared: each job starts on its next certified provider, or waits.",
    closed: "Attempts go to it whatever its breaker says, and its breaker closes.",
    auto: "Its breaker decides again, from its own state.",
  };

  function renderProviders() {
    const list = state.providers;
    const table = $("provider-table");
    table.dataset.count = String(list.length);
    $("provider-table-empty").hidden = list.length > 0;
    const rows = list.map((p) => {
      const d = describeProvider(p);
      const actions = d.actions.map((st) => {
        const label = st === "auto" ? "Clear override…" : `Force ${st}…`;
        const b = el(doc, "button", {
          text: label, cls: st === "open" ? "danger small" : "secondary small",
          attrs: { type: "button", "data-force": st, "aria-label": `${label.replace("…", "")}: ${p.name}` },
        });
        b.addEventListener("click", () => openForce(p.name, st));
        return b;
      });
      return el(doc, "tr", { attrs: { "data-provider": p.name, "data-state": p.state, "data-forced": p.forced?.state ?? "" } }, [
        el(doc, "th", { cls: "mono", text: p.name, attrs: { scope: "row" } }),
        el(doc, "td", {}, [el(doc, "span", { cls: "chip", text: d.state, attrs: { "data-state": d.state } }),
          ...(p.forced ? [" ", el(doc, "span", { cls: "badge forced", text: "forced" })] : [])]),
        el(doc, "td", { text: d.why || "–", attrs: { "data-field": "why" } }),
        el(doc, "td", { cls: "num", text: dateTime(p.since), attrs: { "data-field": "since" } }),
        el(doc, "td", { text: d.failures, attrs: { "data-field": "failures" } }),
        el(doc, "td", { text: d.counts, attrs: { "data-field": "counts" } }),
        el(doc, "td", { text: d.override || "–", attrs: { "data-field": "override" } }),
        el(doc, "td", {}, [el(doc, "div", { cls: "row-actions" }, actions)]),
      ]);
    });
    table.querySelector("tbody")?.replaceChildren(...rows);
    syncBulkProviders();
  }

  /** @type {{provider: string, state: "open" | "closed" | "auto", reason: string} | null} */
  let pendingForce = null;

  /**
   * @param {string} provider
   * @param {"open" | "closed" | "auto"} st
   */
  function openForce(provider, st) {
    const f = form("force-form");
    f.reset();
    pendingForce = { provider, state: st, reason: "" };
    f.dataset.provider = provider;
    f.dataset.state = st;
    $("force-title").textContent = st === "auto" ? `Clear the override of ${provider}` : `Force ${provider} ${st}`;
    $("force-explain").textContent = FORCE_EFFECT[st];
    $("force-edit").hidden = false;
    $("force-confirm").hidden = true;
    fieldError("force-reason", "");
    f.hidden = false;
    area("force-reason").focus();
  }

  function closeForce() {
    form("force-form").hidden = true;
    pendingForce = null;
  }

  form("force-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const p = pendingForce;
    if (!p) {
      return;
    }
    p.reason = area("force-reason").value.trim();
    fieldError("force-reason", p.reason ? "" : "Say why: the reason is kept with the override.");
    if (!p.reason) {
      area("force-reason").focus();
      return;
    }
    $("force-summary").textContent = `${p.state === "auto" ? `Clear the override of ${p.provider}` : `Force ${p.provider} ${p.state}`}, ` +
      `because: “${p.reason}”. ${FORCE_EFFECT[p.state]}`;
    $("force-edit").hidden = true;
    $("force-confirm").hidden = false;
    button("force-confirm-button").focus();
  });
  button("force-back").addEventListener("click", () => {
    $("force-edit").hidden = false;
    $("force-confirm").hidden = true;
    area("force-reason").focus();
  });
  button("force-abort").addEventListener("click", closeForce);
  button("force-confirm-button").addEventListener("click", async () => {
    const p = pendingForce;
    if (!p?.reason) {
      return;
    }
    const b = button("force-confirm-button");
    b.disabled = true;
    try {
      await api("POST", `v1/admin/providers/${encodeURIComponent(p.provider)}/force`, { body: { state: p.state, reason: p.reason } });
      closeForce();
      clearProblem();
      say(p.state === "auto" ? `The override of ${p.provider} is cleared.` : `${p.provider} is forced ${p.state}.`);
      await refreshProviders();
    } catch (err) {
      const problem = showProblem(err, `Forcing ${p.provider} ${p.state}`);
      $("force-edit").hidden = false;
      $("force-confirm").hidden = true;
      fieldError("force-reason", (problem.errors ?? []).filter((e) => e.pointer === "/reason").map((e) => e.detail ?? "").join("; "));
    } finally {
      b.disabled = false;
    }
  });
  button("providers-refresh").addEventListener("click", () => void refreshProviders());

  return { refreshProviders, renderProviders };
}
