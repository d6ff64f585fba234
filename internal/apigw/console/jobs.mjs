// @ts-check
// The console's lists of open jobs: the blocked ones, grouped by the
// provider they wait on, and the others, a page at a time.

import { ApiError, dateTime, el, formatDuration, ms } from "./page.mjs";

/** @typedef {import("./page.mjs").Job} Job */
/** @typedef {import("./page.mjs").BlockedGroup} BlockedGroup */
/** @typedef {import("./page.mjs").Page} Page */

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

/**
 * Wires the lists.
 * @param {Page} page
 */
export function wireJobs(page) {
  const { doc, state, $, button, api, say, showProblem } = page;
  // Calls into the other parts of the page (bound by boot once every part is wired).
  const markOperator = (/** @type {boolean} */ operator) => page.calls.markOperator(operator);
  const openJob = (/** @type {string} */ id) => page.calls.openJob(id);
  const prefillBulk = (/** @type {string} */ provider, /** @type {string} */ since) => page.calls.prefillBulk(provider, since);
  const syncBulkProviders = () => page.calls.syncBulkProviders();


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

  return { refreshQueues, renderQueue };
}
