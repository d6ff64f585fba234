// @ts-check
// The console's shared part: the types of what the API answers, the pure
// helpers every view uses (times, durations, problem documents), the
// elements (made from data, never HTML) and the page itself: its state,
// its one way to call the API, its status line and its problem box.

/**
 * @typedef {{class?: string, message?: string, provider_message?: string, provider_status?: number,
 *   provider_request_id?: string}} Failure
 * @typedef {{model?: string, input_tokens?: number, output_tokens?: number, latency_ms?: number}} AttemptUsage
 * @typedef {{by?: string, at?: string, reason?: string, outcome?: string}} Resolution
 * @typedef {{number: number, provider: string, state: string, started_at: string, finished_at?: string,
 *   error?: Failure, hedge?: boolean, provider_request_id?: string, outcome?: string, unknown_since?: string,
 *   usage?: AttemptUsage, resolution?: Resolution, remote?: Remote}} Attempt
 * @typedef {{id: string, status?: string, tier: string, submitted_at: string, heard_at: string, next_poll_at: string,
 *   polls: number, found: boolean, cancel_requested_at?: string, deadline?: string}} Remote
 * @typedef {{input_tokens?: number, output_tokens?: number, latency_ms?: number, attempts?: number}} JobUsage
 * @typedef {{id: string, type: string, status: string, input?: unknown, providers?: string[], created_at: string,
 *   updated_at?: string, version?: number, attempts?: Attempt[], result?: unknown, completed_by?: number,
 *   error?: Failure, usage?: JobUsage, owner?: string, waiting?: Waiting, tier?: string, stream?: boolean,
 *   stream_url?: string}} Job
 * @typedef {{reason: string, since?: string, until?: string, attempt?: number, provider?: string, detail?: string}} Waiting
 * @typedef {{state: string, by: string, reason: string, at: string}} Forced
 * @typedef {{name: string, state: string, breaker_state?: string, since?: string, reason?: string, open_until?: string,
 *   cooldown_seconds?: number, trips?: number, window_start?: string, failures?: Record<string, number>, held?: number,
 *   overdue?: number, probes?: number, opened?: number, forced?: Forced, updated_at?: string}} Provider
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

/**
 * What one part of the page calls in another, bound by boot once every
 * part is wired (they call each other).
 * @typedef {{
 *   markOperator: (operator: boolean) => void,
 *   refreshQueues: (o?: {more?: string}) => Promise<void>,
 *   renderQueue: (kind: string, jobs: Job[]) => void,
 *   openJob: (id: string) => Promise<void>,
 *   closeJob: () => void,
 *   reloadOpen: () => Promise<void>,
 *   closeForms: () => void,
 *   openResolve: (a: Attempt) => void,
 *   refreshProviders: () => Promise<void>,
 *   renderProviders: () => void,
 *   syncBulkProviders: () => void,
 *   prefillBulk: (provider: string, since: string) => void,
 *   showTrace: (id: string) => Promise<void>,
 *   closeTrace: () => void,
 *   streamJob: (open: {job: Job, abort: AbortController}) => Promise<void>,
 * }} Calls
 * @typedef {ReturnType<typeof newPage>} Page
 */

/** @param {string | undefined} s */
export function ms(s) {
  const t = s ? Date.parse(s) : NaN;
  return Number.isFinite(t) ? t : null;
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
export function el(doc, tag, o = {}, children = []) {
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
export function clock(s) {
  const t = ms(s);
  return t === null ? "–" : new Date(t).toISOString().slice(11, 23) + "Z";
}

/** @param {string | undefined} s */
export function dateTime(s) {
  const t = ms(s);
  return t === null ? "–" : new Date(t).toISOString().replace("T", " ").slice(0, 23) + "Z";
}

/** @param {number | undefined} n */
export function count(n) {
  return typeof n === "number" ? n.toLocaleString("en") : "–";
}

/** Resolves after d ms, or at once when signal aborts. */
export function pause(/** @type {number} */ d, /** @type {AbortSignal} */ signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, d);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve(undefined);
    }, { once: true });
  });
}

/**
 * The page: its elements by ID, its state, the API and the status line and
 * problem box every view reports to.
 * @param {Document} doc
 * @param {Window} win
 */
export function newPage(doc, win) {
  const $ = (/** @type {string} */ id) => byID(doc, id, HTMLElement);
  const input = (/** @type {string} */ id) => byID(doc, id, HTMLInputElement);
  const area = (/** @type {string} */ id) => byID(doc, id, HTMLTextAreaElement);
  const button = (/** @type {string} */ id) => byID(doc, id, HTMLButtonElement);
  const form = (/** @type {string} */ id) => byID(doc, id, HTMLFormElement);
  const select = (/** @type {string} */ id) => byID(doc, id, HTMLSelectElement);
  const fieldset = (/** @type {string} */ id) => byID(doc, id, HTMLFieldSetElement);

  // The API is this page's origin; under a named stage its path prefix is
  // the one the page was served under (…/console/page.mjs → …/).
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

  // Bound by boot, once every part is wired.
  const calls = /** @type {Calls} */ ({});
  return { doc, win, $, input, area, button, form, select, fieldset, state, api, say, showProblem, clearProblem, fieldError, calls };
}
