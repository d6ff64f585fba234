// @ts-check
// The console's view of one job: its fields and usage, its attempts on a
// timeline and in a table, followed live while it is open.

import { ApiError, clock, count, dateTime, el, formatDuration, ms, pause } from "./page.mjs";

/** @typedef {import("./page.mjs").Job} Job */
/** @typedef {import("./page.mjs").Attempt} Attempt */
/** @typedef {import("./page.mjs").Remote} Remote */
/** @typedef {import("./page.mjs").AttemptUsage} AttemptUsage */
/** @typedef {import("./page.mjs").Role} Role */
/** @typedef {import("./page.mjs").Tick} Tick */
/** @typedef {import("./page.mjs").Timeline} Timeline */
/** @typedef {import("./page.mjs").Page} Page */

/** The attempt states, in the order the legend shows them. */
export const ATTEMPT_STATES = ["starting", "running", "succeeded", "failed", "unknown", "discarded", "cancelled"];

/** The job statuses that are over: nothing more will run. */
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);

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
  // Past its deadline the work is given up (issue 40).
  const deadline = open && r.deadline ? `; given up ${clock(r.deadline)}` : "";
  return [
    `at provider: ${r.id}${r.status ? ` (${r.status})` : ""}, tier ${r.tier}${r.found ? ", found after a lost submit" : ""}`,
    `heard ${clock(r.heard_at)}, ${r.polls} polls${next}${deadline}`,
  ];
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
 * Wires the job's view.
 * @param {Page} page
 */
export function wireJob(page) {
  const { doc, state, $, input, button, form, api, say, showProblem, clearProblem } = page;
  // Calls into the other parts of the page (bound by boot once every part is wired).
  const refreshQueues = (/** @type {{more?: string}} */ o = {}) => page.calls.refreshQueues(o);
  const closeForms = () => page.calls.closeForms();
  const openResolve = (/** @type {Attempt} */ a) => page.calls.openResolve(a);
  const showTrace = (/** @type {string} */ id) => page.calls.showTrace(id);

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
    void showTrace(id);
    void follow(state.open);
    void page.calls.streamJob(state.open);
  }

  function closeJob() {
    state.open?.abort.abort();
    state.open = null;
    page.calls.closeTrace();
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
        void showTrace(open.job.id);
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

  return { openJob, closeJob, reloadOpen };
}
