// @ts-check
// The operator console: lists the blocked and other open jobs, opens a job,
// draws its attempts on a timeline with their usage, and resolves an
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
 *   usage?: AttemptUsage, resolution?: Resolution}} Attempt
 * @typedef {{input_tokens?: number, output_tokens?: number, latency_ms?: number, attempts?: number}} JobUsage
 * @typedef {{id: string, type: string, status: string, input?: unknown, providers?: string[], created_at: string,
 *   updated_at?: string, version?: number, attempts?: Attempt[], result?: unknown, completed_by?: number,
 *   error?: Failure, usage?: JobUsage, owner?: string}} Job
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
  });
  button("forget-token").addEventListener("click", () => {
    useToken("");
    closeJob();
    for (const kind of ["blocked", "open"]) {
      renderQueue(kind, []);
    }
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
    const rows = jobs.map((j) => {
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
    });
    const body = table.querySelector("tbody");
    body?.replaceChildren(...rows);
  }

  button("refresh").addEventListener("click", () => void refreshQueues());
  button("blocked-more").addEventListener("click", () => void refreshQueues({ more: "blocked" }));
  button("open-more").addEventListener("click", () => void refreshQueues({ more: "open" }));

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
        a.provider_request_id ? `provider request ${a.provider_request_id}` : ""].filter(Boolean);
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
    }
  }, 15_000);
  void (async () => {
    await refreshQueues();
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
