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
// The functions exported here are pure (tested under Node); boot() wires
// the page and runs only in a browser.

/**
 * @typedef {{class?: string, message?: string, provider_message?: string, provider_status?: number,
 *   provider_request_id?: string}} Failure
 * @typedef {{model?: string, input_tokens?: number, output_tokens?: number, latency_ms?: number}} AttemptUsage
 * @typedef {{by?: string, at?: string, reason?: string, outcome?: string}} Resolution
 * @typedef {{number: number, provider: string, state: string, started_at: string, finished_at?: string,
 *   error?: Failure, hedge?: boolean, provider_request_id?: string, outcome?: string, unknown_since?: string,
 *   usage?: AttemptUsage, resolution?: Resolution, remote?: Remote}} Attempt
 * @typedef {{id: string, status?: string, tier: string, submitted_at: string, heard_at: string, next_poll_at: string,
 *   polls: number, found: boolean, cancel_requested_at?: string}} Remote
 * @typedef {{input_tokens?: number, output_tokens?: number, latency_ms?: number, attempts?: number}} JobUsage
 * @typedef {{id: string, type: string, status: string, input?: unknown, providers?: string[], created_at: string,
 *   updated_at?: string, version?: number, attempts?: Attempt[], result?: unknown, completed_by?: number,
 *   error?: Failure, usage?: JobUsage, owner?: string, waiting?: Waiting, tier?: string}} Job
 * @typedef {{reason: string, since?: string, until?: string, attempt?: number, provider?: string, detail?: string}} Waiting
 * @typedef {{state: string, by: string, reason: string, at: string}} Forced
 * @typedef {{name: string, state: string, breaker_state?: string, since?: string, reason?: string, open_until?: string,
 *   cooldown_seconds?: number, trips?: number, window_start?: string, failures?: Record<string, number>, held?: number,
 *   probes?: number, opened?: number, forced?: Forced, updated_at?: string}} Provider
 * @typedef {{provider: string, jobs: Job[], since: string}} BlockedGroup
 * @typedef {{job_id: string, owner: string, attempt: number, unknown_since: string, result: string}} BulkAttempt
 * @typedef {{dry_run: boolean, matched: number, resolved: number, conflicts: number, scanned: number,
 *   attempts: BulkAttempt[], next_cursor?: string}} BulkResult
 * @typedef {{pointer?: string, parameter?: string, detail?: string}} FieldError
 * @typedef {{type?: string, title?: string, status?: number, detail?: string, instance?: string,
 *   request_id?: string, errors?: FieldError[], [member: string]: unknown}} Problem
 * @typedef {"first" | "hedge" | "fallback" | "retry"} Role
 * @typedef {{number: number, provider: string, state: string, hedge: boolean, role: Role, winner: boolean,
 *   open: boolean, left: number, width: number, unknownFrom: number | null, startedAt: number,
 *   durationMs: number}} Lane
 * @typedef {{at: number, label: string}} Tick
 * @typedef {{start: number, end: number, lanes: Lane[], ticks: Tick[]}} Timeline
 */

/** The attempt states, in the order the legend shows them. */
export const ATTEMPT_STATES = ["starting", "running", "succeeded", "failed", "unknown", "discarded", "cancelled"];

/** The job statuses that are over: nothing more will run. */
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);

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
 * What each attempt is to its job: the first, a hedge (raced beside a
 * silent attempt), a fallback (the next provider after one that did not
 * answer) or a retry (the same provider again).
 * @param {Attempt[]} attempts in number order
 * @returns {Role[]}
 */
export function attemptRoles(attempts) {
  /** @type {Role[]} */
  const roles = [];
  let previous = "";
  for (const [i, a] of attempts.entries()) {
    if (i === 0) {
      roles.push("first");
    } else if (a.hedge) {
      roles.push("hedge");
    } else {
      roles.push(a.provider === previous ? "retry" : "fallback");
    }
    if (!a.hedge) {
      previous = a.provider;
    }
  }
  return roles;
}

/** @param {string | undefined} s */
function ms(s) {
  const t = s ? Date.parse(s) : NaN;
  return Number.isFinite(t) ? t : null;
}

/** Tick spacings, in ms. */
const STEPS = [100, 200, 250, 500, 1000, 2000, 5000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000,
  900_000, 1_800_000, 3_600_000, 7_200_000, 21_600_000, 43_200_000, 86_400_000];

/**
 * Lays the attempts out on one time axis, from the job's creation (or its
 * first start) to the last end, an open attempt ending now. Positions are
 * percentages of that span.
 * @param {Job} job
 * @param {Attempt[]} attempts
 * @param {number} now epoch ms
 * @returns {Timeline}
 */
export function layoutTimeline(job, attempts, now) {
  const sorted = [...attempts].sort((a, b) => a.number - b.number);
  const starts = sorted.map((a) => ms(a.started_at)).filter((t) => t !== null);
  const created = ms(job.created_at);
  const origins = created !== null ? [...starts, created] : starts;
  const start = origins.length > 0 ? Math.min(...origins) : now;
  // An attempt still open (a hedge's loser still running after the job
  // ended, say) ends now.
  const ends = sorted.map((a) => ms(a.finished_at) ?? now);
  const end = Math.max(start + 1000, ...ends);
  const span = end - start;
  const pct = (/** @type {number} */ t) => Math.min(100, Math.max(0, ((t - start) / span) * 100));
  const roles = attemptRoles(sorted);
  const lanes = sorted.map((a, i) => {
    const s = ms(a.started_at) ?? start;
    const e = Math.max(s, ends[i] ?? now);
    const u = ms(a.unknown_since);
    const open = !a.finished_at;
    return {
      number: a.number,
      provider: a.provider,
      state: a.state,
      hedge: Boolean(a.hedge),
      role: roles[i] ?? "first",
      winner: job.completed_by === a.number,
      open,
      left: pct(s),
      width: Math.max(pct(e) - pct(s), 0),
      // The share of the bar, from its right end, spent unknown.
      unknownFrom: u !== null && e > s && u < e ? Math.min(100, ((e - Math.max(u, s)) / (e - s)) * 100) : null,
      startedAt: s,
      durationMs: e - s,
    };
  });
  const step = STEPS.find((st) => span / st <= 8) ?? STEPS[STEPS.length - 1] ?? 86_400_000;
  /** @type {Tick[]} */
  const ticks = [];
  for (let t = 0; t <= span; t += step) {
    ticks.push({ at: (t / span) * 100, label: t === 0 ? "0" : "+" + formatDuration(t) });
  }
  return { start, end, lanes, ticks };
}

/**
 * Where an asynchronous attempt's work stands at its provider: its id and
 * last status, when onejob last heard of it and when it asks next.
 * @param {Remote | undefined} r
 * @param {boolean} [open] whether the attempt is still open (only then is a next ask due)
 * @returns {string[]}
 */
export function remoteLines(r, open = true) {
  if (!r) {
    return [];
  }
  const next = r.cancel_requested_at ? `; cancel asked ${clock(r.cancel_requested_at)}` : open ? `; asks next ${clock(r.next_poll_at)}` : "";
  return [
    `at provider: ${r.id}${r.status ? ` (${r.status})` : ""}, tier ${r.tier}${r.found ? ", found after a lost submit" : ""}`,
    `heard ${clock(r.heard_at)}, ${r.polls} polls${next}`,
  ];
}

/**
 * A duration for people: 850 ms, 1.5 s, 42 s, 3 min 20 s, 2 h 5 min.
 * @param {number} d ms
 */
export function formatDuration(d) {
  if (!Number.isFinite(d) || d < 0) {
    return "–";
  }
  if (d < 1000) {
    return `${Math.round(d)} ms`;
  }
  if (d < 10_000) {
    return `${(d / 1000).toFixed(1).replace(/\.0$/, "")} s`;
  }
  if (d < 60_000) {
    return `${Math.round(d / 1000)} s`;
  }
  if (d < 3_600_000) {
    const m = Math.floor(d / 60_000);
    const s = Math.round((d % 60_000) / 1000);
    return s ? `${m} min ${s} s` : `${m} min`;
  }
  const h = Math.floor(d / 3_600_000);
  const m = Math.round((d % 3_600_000) / 60_000);
  return m ? `${h} h ${m} min` : `${h} h`;
}

/**
 * The job's summed usage: the API's own sum when the job view carries one,
 * else the sum of the attempts' usage, else nothing to show.
 * @param {Job} job
 * @param {Attempt[]} attempts
 * @returns {{input_tokens: number, output_tokens: number, latency_ms: number, attempts: number,
 *   source: "job" | "attempts" | "none"}}
 */
export function sumUsage(job, attempts) {
  const u = job.usage;
  if (u && typeof u === "object") {
    return {
      input_tokens: u.input_tokens ?? 0, output_tokens: u.output_tokens ?? 0, latency_ms: u.latency_ms ?? 0,
      attempts: u.attempts ?? attempts.filter((a) => a.usage).length, source: "job",
    };
  }
  const withUsage = attempts.filter((a) => a.usage);
  if (withUsage.length === 0) {
    return { input_tokens: 0, output_tokens: 0, latency_ms: 0, attempts: 0, source: "none" };
  }
  const sum = (/** @type {(x: AttemptUsage) => number | undefined} */ f) =>
    withUsage.reduce((n, a) => n + (a.usage ? f(a.usage) ?? 0 : 0), 0);
  return {
    input_tokens: sum((x) => x.input_tokens), output_tokens: sum((x) => x.output_tokens),
    latency_ms: sum((x) => x.latency_ms), attempts: withUsage.length, source: "attempts",
  };
}

/**
 * A problem document from any error answer: RFC 9457 as the API sends it,
 * or the gateway's own {"message": …}, or plain text.
 * @param {number} status
 * @param {string} contentType
 * @param {string} text
 * @returns {Problem}
 */
export function problemFrom(status, contentType, text) {
  /** @type {unknown} */
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (body && typeof body === "object" && !Array.isArray(body)) {
    const b = /** @type {Record<string, unknown>} */ (body);
    if (contentType.startsWith("application/problem+json") || typeof b.type === "string" || typeof b.title === "string") {
      return { status, ...b };
    }
    if (typeof b.message === "string") {
      return { status, title: b.message, detail: `the gateway answered ${status} itself (no problem document)` };
    }
  }
  return { status, title: `HTTP ${status}`, detail: text.slice(0, 500) || "no body" };
}

/** The members every problem has, shown first; any other member is shown after them. */
const PROBLEM_MEMBERS = ["type", "title", "status", "detail", "instance", "request_id", "errors"];

/**
 * The problem's members for display, in a stable order: type, detail,
 * instance, request ID, then every extension member (job_id,
 * attempt_state, …) as JSON text.
 * @param {Problem} p
 * @returns {[string, string][]}
 */
export function problemFields(p) {
  /** @type {[string, string][]} */
  const out = [];
  for (const k of ["type", "detail", "instance", "request_id"]) {
    const v = p[k];
    if (v !== undefined && v !== null && v !== "") {
      out.push([k, String(v)]);
    }
  }
  for (const [k, v] of Object.entries(p)) {
    if (!PROBLEM_MEMBERS.includes(k) && v !== undefined) {
      out.push([k, typeof v === "string" ? v : JSON.stringify(v)]);
    }
  }
  return out;
}

/**
 * Jobs oldest first, each once (pages of several listings merged).
 * @param {Job[]} jobs
 */
export function oldestFirst(jobs) {
  /** @type {Map<string, Job>} */
  const byID = new Map();
  for (const j of jobs) {
    byID.set(j.id, j);
  }
  return [...byID.values()].sort((a, b) => (ms(a.created_at) ?? 0) - (ms(b.created_at) ?? 0) || a.id.localeCompare(b.id));
}

/**
 * The blocked jobs grouped by the provider each waits on (the provider of
 * its unknown attempt: the API's waiting.provider, else the first unknown
 * attempt listed), groups by provider name, each group's jobs oldest first
 * and its since the earliest an attempt of it became unknown.
 * @param {Job[]} jobs
 * @returns {BlockedGroup[]}
 */
export function groupBlocked(jobs) {
  /** @type {Map<string, BlockedGroup>} */
  const groups = new Map();
  for (const j of oldestFirst(jobs)) {
    const unknown = (j.attempts ?? []).find((a) => a.state === "unknown");
    const provider = j.waiting?.provider || unknown?.provider || "";
    const since = j.waiting?.reason === "attempt_unknown" ? j.waiting.since ?? "" : "";
    const g = groups.get(provider) ?? { provider, jobs: [], since: "" };
    g.jobs.push(j);
    if (since && (!g.since || (ms(since) ?? Infinity) < (ms(g.since) ?? Infinity))) {
      g.since = since;
    }
    groups.set(provider, g);
  }
  return [...groups.values()].sort((a, b) => a.provider.localeCompare(b.provider));
}

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
  const counts = `${p.held ?? 0} held, ${plural(p.probes ?? 0, "probe")}, opened ${plural(p.opened ?? 0, "time")}`;
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

/** An error answer of the API, or the network failing, as a problem. */
export class ApiError extends Error {
  /** @param {Problem} problem */
  constructor(problem) {
    super(problem.title ?? "request failed");
    this.problem = problem;
  }
}

// ---- the page -------------------------------------------------------------------

/**
 * @template {HTMLElement} T
 * @param {Document} doc
 * @param {string} id
 * @param {new () => T} kind
 * @returns {T}
 */
function byID(doc, id, kind) {
  const el = doc.getElementById(id);
  if (!(el instanceof kind)) {
    throw new Error(`console: #${id} is missing or not a ${kind.name}`);
  }
  return el;
}

/**
 * Makes an element with text and attributes (never HTML: every value is
 * data from the API).
 * @param {Document} doc
 * @param {string} tag
 * @param {{text?: string, cls?: string, attrs?: Record<string, string>}} [o]
 * @param {(Node | string)[]} [children]
 */
function el(doc, tag, o = {}, children = []) {
  const e = doc.createElement(tag);
  if (o.cls) {
    e.className = o.cls;
  }
  if (o.text !== undefined) {
    e.textContent = o.text;
  }
  for (const [k, v] of Object.entries(o.attrs ?? {})) {
    e.setAttribute(k, v);
  }
  e.append(...children);
  return e;
}

/** @param {string | undefined} s an RFC 3339 time */
function clock(s) {
  const t = ms(s);
  return t === null ? "–" : new Date(t).toISOString().slice(11, 23) + "Z";
}

/** @param {string | undefined} s */
function dateTime(s) {
  const t = ms(s);
  return t === null ? "–" : new Date(t).toISOString().replace("T", " ").slice(0, 23) + "Z";
}

/** @param {number | undefined} n */
function count(n) {
  return typeof n === "number" ? n.toLocaleString("en") : "–";
}

/** Resolves after d ms, or at once when signal aborts. */
function pause(/** @type {number} */ d, /** @type {AbortSignal} */ signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, d);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve(undefined);
    }, { once: true });
  });
}

/**
 * Wires the page. Everything it knows lives in this closure.
 * @param {Document} doc
 * @param {Window} win
 */
export function boot(doc, win) {
  const $ = (/** @type {string} */ id) => byID(doc, id, HTMLElement);
  const input = (/** @type {string} */ id) => byID(doc, id, HTMLInputElement);
  const area = (/** @type {string} */ id) => byID(doc, id, HTMLTextAreaElement);
  const button = (/** @type {string} */ id) => byID(doc, id, HTMLButtonElement);
  const form = (/** @type {string} */ id) => byID(doc, id, HTMLFormElement);
  const select = (/** @type {string} */ id) => byID(doc, id, HTMLSelectElement);
  const fieldset = (/** @type {string} */ id) => byID(doc, id, HTMLFieldSetElement);

  // The API is this page's origin; under a named stage its path prefix is
  // the one the page was served under (…/console/console.mjs → …/).
  const apiBase = new URL("../", import.meta.url);

  const state = {
    token: "",
    /** @type {{job: Job, attempts: Attempt[], etag: string, abort: AbortController} | null} */
    open: null,
    /** @type {Record<string, {jobs: Job[], cursors: Map<string, string>}>} */
    queues: {},
    /** @type {ReturnType<typeof setInterval> | null} */
    ticker: null,
    listing: false,
    relist: false,
    /** Set when the API has no admin listing: the token owner's own jobs are listed instead. */
    ownListing: false,
    /** @type {Provider[]} */
    providers: [],
  };

  /**
   * One call to the API.
   * @param {string} method
   * @param {string} path relative, e.g. "v1/jobs/job_x"
   * @param {{body?: unknown, headers?: Record<string, string>, signal?: AbortSignal}} [o]
   * @returns {Promise<{status: number, body: any, etag: string}>}
   */
  async function api(method, path, o = {}) {
    /** @type {Record<string, string>} */
    const headers = { Authorization: `Bearer ${state.token}`, Accept: "application/json, application/problem+json", ...o.headers };
    /** @type {RequestInit} */
    const init = { method, headers, cache: "no-store", credentials: "omit", redirect: "error" };
    if (o.signal) {
      init.signal = o.signal;
    }
    if (o.body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(o.body);
    }
    let resp;
    try {
      resp = await fetch(new URL(path, apiBase), init);
    } catch (err) {
      if (o.signal?.aborted) {
        throw err;
      }
      throw new ApiError({ title: "Network error", detail: `the API did not answer (${String(err)})` });
    }
    const etag = resp.headers.get("ETag") ?? "";
    if (resp.status === 304) {
      return { status: 304, body: null, etag };
    }
    const text = await resp.text();
    if (!resp.ok) {
      throw new ApiError(problemFrom(resp.status, resp.headers.get("Content-Type") ?? "", text));
    }
    return { status: resp.status, body: text ? JSON.parse(text) : null, etag };
  }

  // ---- status and problems ----

  /** @param {string} text */
  function say(text) {
    $("status").textContent = text;
  }

  /**
   * Shows an error answer: title, status, type, detail, every member, and
   * errors[] one per line.
   * @param {unknown} err
   * @param {string} context what the console was doing
   */
  function showProblem(err, context) {
    const p = err instanceof ApiError ? err.problem : { title: "Console error", detail: String(err) };
    const box = $("problem");
    box.dataset.type = p.type ?? "";
    box.dataset.status = String(p.status ?? "");
    $("problem-title").textContent = `${p.title ?? "Problem"}${p.status ? ` (${p.status})` : ""}`;
    $("problem-context").textContent = context;
    const fields = $("problem-fields");
    fields.replaceChildren(...problemFields(p).flatMap(([k, v]) => [el(doc, "dt", { text: k }), el(doc, "dd", { text: v, attrs: { "data-member": k } })]));
    const errors = $("problem-errors");
    errors.replaceChildren(...(Array.isArray(p.errors) ? p.errors : []).map((e) =>
      el(doc, "li", { attrs: { "data-pointer": e.pointer ?? e.parameter ?? "" } }, [
        el(doc, "code", { text: e.pointer ?? (e.parameter ? `?${e.parameter}` : "(body)") }), ` ${e.detail ?? ""}`])));
    box.hidden = false;
    say(`${context}: ${p.title ?? "failed"}${p.detail ? ` — ${p.detail}` : ""}`);
    return p;
  }

  function clearProblem() {
    $("problem").hidden = true;
  }

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

  // ---- the lists ----

  /** @type {Record<string, string[]>} */
  const QUEUES = { blocked: ["unknown"], open: ["pending", "running"] };

  /**
   * Loads the first page of each list (more: the next page of each status
   * that has one).
   * @param {{more?: string}} [o]
   */
  async function refreshQueues(o = {}) {
    if (!state.token) {
      return;
    }
    if (state.listing) {
      // Asked again while listing (a job changed meanwhile): list once more after.
      state.relist = state.relist || !o.more;
      return;
    }
    state.listing = true;
    try {
      for (const [kind, statuses] of Object.entries(QUEUES)) {
        if (o.more && o.more !== kind) {
          continue;
        }
        const prev = state.queues[kind];
        /** @type {{jobs: Job[], cursors: Map<string, string>}} */
        const q = o.more && prev ? prev : { jobs: [], cursors: new Map() };
        for (const status of statuses) {
          const cursor = q.cursors.get(status);
          if (o.more && !cursor) {
            continue;
          }
          const page = await listPage(status, o.more ? cursor : undefined);
          q.jobs.push(...page.jobs);
          if (page.next_cursor) {
            q.cursors.set(status, page.next_cursor);
          } else {
            q.cursors.delete(status);
          }
        }
        q.jobs = oldestFirst(q.jobs);
        state.queues[kind] = q;
        renderQueue(kind, q.jobs);
        button(`${kind}-more`).hidden = q.cursors.size === 0;
      }
      const blocked = state.queues.blocked?.jobs.length ?? 0;
      const open = state.queues.open?.jobs.length ?? 0;
      $("queues-updated").textContent = `updated ${new Date().toISOString().slice(11, 19)}Z${state.ownListing ? " · only this token's own jobs: the API has no admin listing" : ""}`;
      say(`${blocked} blocked job${blocked === 1 ? "" : "s"}, ${open} other open job${open === 1 ? "" : "s"}.`);
    } catch (err) {
      showProblem(err, "Listing open jobs");
    } finally {
      state.listing = false;
    }
    if (state.relist) {
      state.relist = false;
      await refreshQueues();
    }
  }

  /**
   * One page of one status, across owners (GET /v1/admin/jobs); an API
   * without that route lists the token owner's own jobs instead.
   * @param {string} status
   * @param {string | undefined} cursor
   * @returns {Promise<{jobs: Job[], next_cursor?: string}>}
   */
  async function listPage(status, cursor) {
    const q = new URLSearchParams({ status, limit: "50" });
    if (cursor) {
      q.set("cursor", cursor);
    }
    if (!state.ownListing) {
      try {
        const page = (await api("GET", `v1/admin/jobs?${q}`)).body;
        markOperator(true);
        return page;
      } catch (err) {
        const p = err instanceof ApiError ? err.problem : null;
        if (p?.status === 403) {
          markOperator(false);
        }
        if (!p || (p.status !== 404 && p.status !== 405)) {
          throw err;
        }
        state.ownListing = true;
      }
    }
    return (await api("GET", `v1/jobs?${q}`)).body;
  }

  /**
   * @param {string} kind
   * @param {Job[]} jobs
   */
  function renderQueue(kind, jobs) {
    const table = $(kind);
    table.dataset.count = String(jobs.length);
    $(`${kind}-empty`).hidden = jobs.length > 0;
    const now = Date.now();
    if (kind !== "blocked") {
      table.querySelector("tbody")?.replaceChildren(...jobs.map((j) => jobRow(j, now)));
      return;
    }
    // Blocked jobs, a row group per provider they wait on, each with its
    // way into the bulk resolution.
    const groups = groupBlocked(jobs);
    for (const body of table.querySelectorAll("tbody")) {
      body.remove();
    }
    table.append(...groups.map((g) => {
      const name = g.provider || "(no unknown attempt listed)";
      /** @type {(Node | string)[]} */
      const head = [el(doc, "span", { cls: "mono", text: name }),
        ` · ${g.jobs.length} blocked${g.since ? ` · unknown since ${dateTime(g.since)} or later` : ""} `];
      if (g.provider) {
        const b = el(doc, "button", {
          text: "Resolve in bulk…", cls: "secondary small",
          attrs: { type: "button", "data-bulk-provider": g.provider, "aria-label": `resolve the unknown attempts of ${g.provider} in bulk` },
        });
        b.addEventListener("click", () => prefillBulk(g.provider, g.since));
        head.push(b);
      }
      return el(doc, "tbody", { attrs: { "data-provider": g.provider, "data-count": String(g.jobs.length) } }, [
        el(doc, "tr", { cls: "group-head" }, [el(doc, "th", { attrs: { colspan: "7", scope: "rowgroup" } }, head)]),
        ...g.jobs.map((j) => jobRow(j, now)),
      ]);
    }));
    syncBulkProviders();
  }

  /**
   * One job's row in a list.
   * @param {Job} j
   * @param {number} now
   */
  function jobRow(j, now) {
    const open = el(doc, "button", { text: j.id, cls: "link", attrs: { type: "button", "data-open-job": j.id, "aria-label": `open job ${j.id}` } });
    open.addEventListener("click", () => void openJob(j.id));
    const created = ms(j.created_at);
    const attempts = j.attempts ?? [];
    const tr = el(doc, "tr", { attrs: { "data-job-id": j.id, "data-status": j.status } }, [
      el(doc, "td", {}, [open]),
      el(doc, "td", { cls: "mono", text: j.owner ?? "–" }),
      el(doc, "td", { text: j.type }),
      el(doc, "td", {}, [el(doc, "span", { cls: "chip", text: j.status, attrs: { "data-status": j.status } })]),
      el(doc, "td", { cls: "num", text: dateTime(j.created_at) }),
      el(doc, "td", { cls: "num", text: created === null ? "–" : formatDuration(now - created) }),
      el(doc, "td", { text: attempts.map((a) => `#${a.number} ${a.provider} ${a.state}`).join(", ") || "none yet" }),
    ]);
    tr.dataset.selected = String(state.open?.job.id === j.id);
    return tr;
  }

  button("refresh").addEventListener("click", () => void refreshQueues());
  button("blocked-more").addEventListener("click", () => void refreshQueues({ more: "blocked" }));
  button("open-more").addEventListener("click", () => void refreshQueues({ more: "open" }));

  // ---- provider health: each breaker, and an operator's override ----

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

  // ---- bulk resolution: select, count, a reason, a confirmation, the result ----

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

  // ---- one job ----

  form("find-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const id = input("find-id").value.trim();
    if (id) {
      void openJob(id);
    }
  });

  /** @param {string} id */
  async function openJob(id) {
    if (!state.token) {
      showProblem(new ApiError({ title: "No token", detail: "paste an operator token first" }), `Opening ${id}`);
      return;
    }
    closeJob();
    const abort = new AbortController();
    try {
      const [got, list] = await Promise.all([
        api("GET", `v1/jobs/${encodeURIComponent(id)}`, { signal: abort.signal }),
        api("GET", `v1/jobs/${encodeURIComponent(id)}/attempts`, { signal: abort.signal }),
      ]);
      state.open = { job: got.body, attempts: list.body.attempts ?? [], etag: got.etag, abort };
    } catch (err) {
      if (!abort.signal.aborted) {
        showProblem(err, `Opening job ${id}`);
      }
      return;
    }
    clearProblem();
    closeForms();
    $("job").hidden = false;
    renderJob();
    for (const tr of doc.querySelectorAll("table.jobs tbody tr")) {
      if (tr instanceof HTMLElement) {
        tr.dataset.selected = String(tr.dataset.jobId === id);
      }
    }
    say(`Job ${id}: ${state.open.job.status}, ${state.open.attempts.length} attempt${state.open.attempts.length === 1 ? "" : "s"}.`);
    $("job-title").scrollIntoView({ block: "nearest" });
    void follow(state.open);
  }

  function closeJob() {
    state.open?.abort.abort();
    state.open = null;
    $("job").hidden = true;
    if (state.ticker) {
      clearInterval(state.ticker);
      state.ticker = null;
    }
  }

  /**
   * Follows the open job with held GETs (If-None-Match + Prefer: wait=20):
   * one request per 20 s while nothing changes, the change within half a
   * second when something does; then its attempts are read again.
   * @param {{job: Job, attempts: Attempt[], etag: string, abort: AbortController}} open
   */
  async function follow(open) {
    const signal = open.abort.signal;
    const id = encodeURIComponent(open.job.id);
    $("job-following").textContent = "following live";
    while (!signal.aborted) {
      const asked = Date.now();
      try {
        const r = await api("GET", `v1/jobs/${id}`, { headers: { "If-None-Match": open.etag, Prefer: "wait=20" }, signal });
        if (r.status === 304) {
          // An API that does not hold requests must not be hammered.
          if (Date.now() - asked < 1000) {
            await pause(2000, signal);
          }
          continue;
        }
        const list = await api("GET", `v1/jobs/${id}/attempts`, { signal });
        if (signal.aborted) {
          return;
        }
        // What the lists show of it changed too.
        void refreshQueues();
        open.job = r.body;
        open.etag = r.etag;
        open.attempts = list.body.attempts ?? [];
        renderJob();
        say(`Job ${open.job.id} changed: ${open.job.status}.`);
      } catch (err) {
        if (signal.aborted) {
          return;
        }
        showProblem(err, `Following job ${open.job.id}`);
        $("job-following").textContent = "not following (retrying)";
        await pause(5000, signal);
        $("job-following").textContent = "following live";
      }
    }
  }

  /** Draws the open job: fields, usage, timeline, attempts, actions. */
  function renderJob() {
    const open = state.open;
    if (!open) {
      return;
    }
    const { job, attempts } = open;
    $("job-id").textContent = job.id;
    const chip = $("job-status");
    chip.textContent = job.status;
    chip.dataset.status = job.status;
    $("job").dataset.status = job.status;

    const winner = attempts.find((a) => a.number === job.completed_by);
    /** @type {[string, Node | string][]} */
    const fields = [
      ["type", job.type],
      ["status", job.status],
      ...(/** @type {[string, string][]} */ (job.owner ? [["owner", job.owner]] : [])),
      ["created", dateTime(job.created_at)],
      ["updated", dateTime(job.updated_at)],
      ["version", String(job.version ?? "–")],
      ["providers", (job.providers ?? []).join(" → ") || "–"],
      // How long the job may wait (absent: now); a window is priced lower.
      ["tier", job.tier ?? "now"],
    ];
    if (job.completed_by) {
      fields.push(["completed by", `attempt ${job.completed_by}${winner ? ` (${winner.provider})` : ""}`]);
    }
    if (job.result !== undefined) {
      fields.push(["result", el(doc, "pre", { text: JSON.stringify(job.result, null, 2) })]);
    }
    if (job.error) {
      fields.push(["error", `${job.error.class ?? ""}: ${job.error.message ?? ""}`]);
    }
    fields.push(["input", el(doc, "details", {}, [el(doc, "summary", { text: "show" }), el(doc, "pre", { text: JSON.stringify(job.input ?? {}, null, 2) })])]);
    $("job-fields").replaceChildren(...fields.flatMap(([k, v]) => [el(doc, "dt", { text: k }), el(doc, "dd", { attrs: { "data-field": k } }, [v])]));

    const u = sumUsage(job, attempts);
    const usage = $("job-usage");
    usage.dataset.source = u.source;
    usage.replaceChildren(...(u.source === "none"
      ? [el(doc, "dt", { text: "usage" }), el(doc, "dd", { text: "not reported (yet)" })]
      : [
        ["input tokens", count(u.input_tokens)], ["output tokens", count(u.output_tokens)],
        ["latency", formatDuration(u.latency_ms)], ["attempts counted", `${u.attempts}${u.source === "attempts" ? " (summed here)" : ""}`],
      ].flatMap(([k, v]) => [el(doc, "dt", { text: k ?? "" }), el(doc, "dd", { text: v ?? "", attrs: { "data-usage": k ?? "" } })])));

    renderTimeline();
    renderAttempts();
    button("cancel-open").hidden = TERMINAL.has(job.status);
    if (!state.ticker && attempts.some((a) => !a.finished_at)) {
      state.ticker = setInterval(() => {
        if (!state.open || state.open.attempts.every((a) => a.finished_at)) {
          if (state.ticker) {
            clearInterval(state.ticker);
          }
          state.ticker = null;
        }
        renderTimeline();
      }, 250);
    }
  }

  /** The lanes: a bar per attempt, with its provider, badges and state. */
  function renderTimeline() {
    const open = state.open;
    if (!open) {
      return;
    }
    const tl = layoutTimeline(open.job, open.attempts, Date.now());
    const lanes = tl.lanes.map((l) => {
      const badges = [];
      if (l.hedge) {
        badges.push(el(doc, "span", { cls: "badge hedge", text: "hedge" }));
      }
      if (l.role === "fallback" || l.role === "retry") {
        badges.push(el(doc, "span", { cls: `badge ${l.role}`, text: l.role }));
      }
      if (l.winner) {
        badges.push(el(doc, "span", { cls: "badge winner", text: "winner" }));
      }
      const bar = el(doc, "div", { cls: "bar" });
      bar.style.left = `${l.left}%`;
      bar.style.width = `${l.width}%`;
      if (l.unknownFrom !== null) {
        const u = el(doc, "div", { cls: "was-unknown", attrs: { title: "unknown" } });
        u.style.width = `${l.unknownFrom}%`;
        bar.append(u);
      }
      const time = el(doc, "span", { cls: "lane-time", text: `${formatDuration(l.durationMs)}${l.open ? " so far" : ""}` });
      // Beside the bar: after it, else before it, else (a bar across the
      // whole track) inside its end.
      if (l.left + l.width <= 82) {
        time.style.left = `calc(${l.left + l.width}% + 6px)`;
      } else if (l.left >= 18) {
        time.style.right = `calc(${100 - l.left}% + 6px)`;
      } else {
        time.classList.add("inside");
        time.style.right = `calc(${100 - l.left - l.width}% + 6px)`;
      }
      const label = `attempt ${l.number}, ${l.provider}${l.hedge ? ", hedge" : ""}${l.role === "fallback" ? ", fallback" : ""}` +
        `, ${l.state}${l.winner ? ", winner" : ""}, started ${new Date(l.startedAt).toISOString().slice(11, 23)}Z, ` +
        `${formatDuration(l.durationMs)}${l.open ? " so far" : ""}`;
      return el(doc, "li", {
        cls: `lane state-${l.state}`,
        attrs: {
          "data-attempt": String(l.number), "data-provider": l.provider, "data-state": l.state, "data-hedge": String(l.hedge),
          "data-role": l.role, "data-winner": String(l.winner), "data-open": String(l.open), "aria-label": label,
        },
      }, [
        el(doc, "div", { cls: "lane-label", attrs: { "aria-hidden": "true" } }, [
          el(doc, "span", { text: `#${l.number}` }), el(doc, "span", { cls: "provider", text: l.provider }), ...badges,
          el(doc, "span", { cls: "state-text", text: l.state }),
        ]),
        el(doc, "div", { cls: "track", attrs: { "aria-hidden": "true" } }, [bar, time]),
      ]);
    });
    $("lanes").replaceChildren(...lanes);
    if (lanes.length === 0) {
      $("lanes").append(el(doc, "li", { cls: "muted", text: "no attempts yet" }));
    }
    $("axis").replaceChildren(...tl.ticks.map((t) => {
      const tick = el(doc, "span", { cls: "tick", text: t.label });
      tick.style.left = `${t.at}%`;
      return tick;
    }), el(doc, "span", { cls: "visually-hidden", text: `from ${new Date(tl.start).toISOString()}` }));
    $("timeline").dataset.start = new Date(tl.start).toISOString();
  }

  /** The attempts table, with usage and the resolve action for unknown attempts. */
  function renderAttempts() {
    const open = state.open;
    if (!open) {
      return;
    }
    const roles = attemptRoles(open.attempts);
    const rows = open.attempts.map((a, i) => {
      const role = roles[i];
      const took = ms(a.finished_at) !== null && ms(a.started_at) !== null
        ? formatDuration((ms(a.finished_at) ?? 0) - (ms(a.started_at) ?? 0))
        : `${formatDuration(Date.now() - (ms(a.started_at) ?? Date.now()))} so far`;
      const err = a.error;
      const errText = err
        ? [`${err.class ?? ""}: ${err.message ?? ""}`,
          err.provider_status !== undefined ? `provider status ${err.provider_status}` : "",
          err.provider_message ? `provider said: ${err.provider_message}` : "",
          err.provider_request_id ? `provider request ${err.provider_request_id}` : ""].filter(Boolean)
        : [];
      const r = a.resolution;
      const outcome = [a.outcome ?? "",
        r ? `resolved ${r.outcome ?? ""} by ${r.by ?? "?"} at ${dateTime(r.at)}: ${r.reason ?? ""}` : "",
        a.unknown_since ? `unknown since ${clock(a.unknown_since)}` : "",
        a.provider_request_id ? `provider request ${a.provider_request_id}` : "",
        ...remoteLines(a.remote, !a.finished_at)].filter(Boolean);
      /** @type {Node[]} */
      const action = [];
      if (a.state === "unknown") {
        const b = el(doc, "button", { text: "Resolve…", attrs: { type: "button", "data-resolve": String(a.number), "aria-label": `resolve attempt ${a.number}` } });
        b.addEventListener("click", () => openResolve(a));
        action.push(b);
      }
      return el(doc, "tr", { attrs: { "data-attempt": String(a.number), "data-state": a.state } }, [
        el(doc, "td", { cls: "num", text: String(a.number) }),
        el(doc, "td", {}, [el(doc, "span", { cls: "mono", text: a.provider }),
          ...(a.hedge ? [" ", el(doc, "span", { cls: "badge hedge", text: "hedge" })] : []),
          ...(role === "fallback" ? [" ", el(doc, "span", { cls: "badge fallback", text: "fallback" })] : []),
          ...(a.number === open.job.completed_by ? [" ", el(doc, "span", { cls: "badge winner", text: "winner" })] : [])]),
        el(doc, "td", { cls: `state-${a.state}` }, [el(doc, "span", { cls: "state-text", text: a.state })]),
        el(doc, "td", { cls: "num", text: clock(a.started_at) }),
        el(doc, "td", { cls: "num", text: took }),
        el(doc, "td", { cls: "mono", text: a.usage?.model ?? "–", attrs: { "data-usage": "model" } }),
        el(doc, "td", { cls: "num", text: a.usage ? `${count(a.usage.input_tokens)} / ${count(a.usage.output_tokens)}` : "–", attrs: { "data-usage": "tokens" } }),
        el(doc, "td", { cls: "num", text: a.usage?.latency_ms !== undefined ? formatDuration(a.usage.latency_ms) : "–", attrs: { "data-usage": "latency" } }),
        el(doc, "td", {}, errText.map((t) => el(doc, "div", { text: t }))),
        el(doc, "td", {}, outcome.map((t) => el(doc, "div", { text: t }))),
        el(doc, "td", {}, action),
      ]);
    });
    $("attempts").querySelector("tbody")?.replaceChildren(...rows);
  }

  // ---- resolve and cancel: a reason, a review, a confirmation ----

  /** @type {{attempt: number, outcome: string, reason: string, result?: unknown} | null} */
  let pendingResolve = null;

  function closeForms() {
    for (const id of ["resolve-form", "cancel-form"]) {
      $(id).hidden = true;
    }
    pendingResolve = null;
  }

  /** @param {Attempt} a */
  function openResolve(a) {
    closeForms();
    const f = form("resolve-form");
    f.reset();
    f.dataset.attempt = String(a.number);
    $("resolve-n").textContent = `${a.number} (${a.provider})`;
    $("resolve-key").textContent = `${state.open?.job.id}/${a.number}`;
    showResolveStep("edit");
    syncOutcome();
    fieldError("resolve-reason", "");
    fieldError("resolve-result", "");
    f.hidden = false;
    area("resolve-reason").focus();
  }

  /** @param {"edit" | "confirm"} step */
  function showResolveStep(step) {
    $("resolve-edit").hidden = step !== "edit";
    $("resolve-confirm").hidden = step !== "confirm";
  }

  function outcomeChoice() {
    const checked = form("resolve-form").querySelector('input[name="outcome"]:checked');
    return checked instanceof HTMLInputElement ? checked.value : "failed";
  }

  function syncOutcome() {
    $("resolve-result-field").hidden = outcomeChoice() !== "succeeded";
  }

  /**
   * Marks a field invalid with a message, or clears it.
   * @param {string} id
   * @param {string} message
   */
  function fieldError(id, message) {
    const field = $(id);
    const note = $(`${id}-error`);
    note.textContent = message;
    note.hidden = !message;
    if (message) {
      field.setAttribute("aria-invalid", "true");
    } else {
      field.removeAttribute("aria-invalid");
    }
  }

  form("resolve-form").addEventListener("change", syncOutcome);
  form("resolve-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const n = Number(form("resolve-form").dataset.attempt);
    const outcome = outcomeChoice();
    const reason = area("resolve-reason").value.trim();
    fieldError("resolve-reason", reason ? "" : "Say why: the reason is recorded with the resolution.");
    /** @type {unknown} */
    let result;
    let resultOK = true;
    fieldError("resolve-result", "");
    if (outcome === "succeeded") {
      try {
        result = JSON.parse(area("resolve-result").value);
        if (typeof result !== "object" || result === null || Array.isArray(result)) {
          throw new Error("not an object");
        }
      } catch {
        resultOK = false;
        fieldError("resolve-result", "The result must be a JSON object, e.g. {\"text\": \"…\"}.");
      }
    }
    if (!reason) {
      area("resolve-reason").focus();
      return;
    }
    if (!resultOK) {
      area("resolve-result").focus();
      return;
    }
    pendingResolve = { attempt: n, outcome, reason, ...(outcome === "succeeded" ? { result } : {}) };
    $("resolve-summary").textContent = `Resolve attempt ${n} of ${state.open?.job.id} as ${outcome}` +
      `${outcome === "succeeded" ? " with the result given" : ""}, because: “${reason}”. ` +
      (outcome === "failed" ? "The job then goes on with its next provider, if one is left. " : "") +
      (outcome === "cancelled" ? "The job is then cancelled. " : "") + "This cannot be undone.";
    showResolveStep("confirm");
    button("resolve-confirm-button").focus();
  });
  button("resolve-back").addEventListener("click", () => {
    pendingResolve = null;
    showResolveStep("edit");
    area("resolve-reason").focus();
  });
  button("resolve-abort").addEventListener("click", closeForms);
  button("resolve-confirm-button").addEventListener("click", async () => {
    const open = state.open;
    const p = pendingResolve;
    if (!open || !p) {
      return;
    }
    const b = button("resolve-confirm-button");
    b.disabled = true;
    try {
      /** @type {Record<string, unknown>} */
      const body = { outcome: p.outcome, reason: p.reason };
      if (p.result !== undefined) {
        body.result = p.result;
      }
      await api("POST", `v1/jobs/${encodeURIComponent(open.job.id)}/attempts/${p.attempt}/resolve`, { body });
      closeForms();
      clearProblem();
      say(`Attempt ${p.attempt} of ${open.job.id} resolved as ${p.outcome}.`);
      await reloadOpen();
      void refreshQueues();
    } catch (err) {
      const problem = showProblem(err, `Resolving attempt ${p.attempt} of ${open.job.id}`);
      // Field errors go back to the fields they name.
      showResolveStep("edit");
      const at = (/** @type {(p: string) => boolean} */ match) => (problem.errors ?? [])
        .filter((e) => e.pointer !== undefined && match(e.pointer)).map((e) => `${e.pointer}: ${e.detail ?? ""}`).join("; ");
      fieldError("resolve-result", at((ptr) => ptr.startsWith("/result")));
      fieldError("resolve-reason", at((ptr) => ptr === "/reason"));
    } finally {
      b.disabled = false;
    }
  });

  let cancelReason = "";
  button("cancel-open").addEventListener("click", () => {
    closeForms();
    const f = form("cancel-form");
    f.reset();
    $("cancel-edit").hidden = false;
    $("cancel-confirm").hidden = true;
    fieldError("cancel-reason", "");
    f.hidden = false;
    area("cancel-reason").focus();
  });
  form("cancel-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    cancelReason = area("cancel-reason").value.trim();
    fieldError("cancel-reason", cancelReason ? "" : "Say why the job is cancelled.");
    if (!cancelReason) {
      area("cancel-reason").focus();
      return;
    }
    $("cancel-summary").textContent = `Cancel job ${state.open?.job.id}, because: “${cancelReason}”. ` +
      "Its open attempts are abandoned and no other runs. This cannot be undone.";
    $("cancel-edit").hidden = true;
    $("cancel-confirm").hidden = false;
    button("cancel-confirm-button").focus();
  });
  button("cancel-back").addEventListener("click", () => {
    $("cancel-edit").hidden = false;
    $("cancel-confirm").hidden = true;
  });
  button("cancel-abort").addEventListener("click", closeForms);
  button("cancel-confirm-button").addEventListener("click", async () => {
    const open = state.open;
    if (!open || !cancelReason) {
      return;
    }
    const b = button("cancel-confirm-button");
    b.disabled = true;
    try {
      await api("POST", `v1/jobs/${encodeURIComponent(open.job.id)}/cancel`, { body: { reason: cancelReason } });
      closeForms();
      clearProblem();
      say(`Job ${open.job.id} cancelled.`);
      await reloadOpen();
      void refreshQueues();
    } catch (err) {
      showProblem(err, `Cancelling job ${open.job.id}`);
    } finally {
      b.disabled = false;
    }
  });

  /** Reads the open job and its attempts again now (after an action). */
  async function reloadOpen() {
    const open = state.open;
    if (!open) {
      return;
    }
    const id = encodeURIComponent(open.job.id);
    const [got, list] = await Promise.all([api("GET", `v1/jobs/${id}`), api("GET", `v1/jobs/${id}/attempts`)]);
    if (state.open !== open) {
      return;
    }
    open.job = got.body;
    open.etag = got.etag;
    open.attempts = list.body.attempts ?? [];
    renderJob();
  }

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
