// @ts-check
// The open job's trace (issue 42): the spans every function recorded of
// the job's trace (GET /v1/jobs/{id}/trace; onejob run keeps them in
// memory, with no collector), drawn as a timeline: a row per span, under
// its parent, a bar from its start to its end, failed spans marked.
// Deployed, the API keeps no spans and says where to read them (X-Ray).

import { ApiError, el, formatDuration, ms } from "./page.mjs";

/**
 * @typedef {{span_id: string, parent_span_id?: string, name: string, kind: string, service: string, start: string,
 *   end: string, error: boolean, attributes?: Record<string, string>}} Span
 * @typedef {{job_id: string, trace_id?: string, spans: Span[], truncated: boolean}} JobTrace
 * @typedef {{id: string, parent: string, name: string, service: string, kind: string, error: boolean, depth: number,
 *   left: number, width: number, startMs: number, durationMs: number, attributes: Record<string, string>}} SpanRow
 * @typedef {{start: number, end: number, rows: SpanRow[]}} SpanLayout
 */

/**
 * Lays a trace's spans out: each after its parent (siblings by start),
 * indented by depth; a span whose parent was not recorded (the client's
 * span, say) is a root. Positions are percentages of the trace's span of
 * time, from its first start to its last end.
 * @param {Span[]} spans
 * @returns {SpanLayout}
 */
export function layoutSpans(spans) {
  const ids = new Set(spans.map((s) => s.span_id));
  /** @type {Map<string, Span[]>} */
  const children = new Map();
  /** @type {Span[]} */
  const roots = [];
  for (const s of spans) {
    const p = s.parent_span_id;
    if (p && p !== s.span_id && ids.has(p)) {
      children.set(p, [...(children.get(p) ?? []), s]);
    } else {
      roots.push(s);
    }
  }
  const byStart = (/** @type {Span} */ a, /** @type {Span} */ b) => (ms(a.start) ?? 0) - (ms(b.start) ?? 0);
  const starts = spans.map((s) => ms(s.start)).filter((t) => t !== null);
  const ends = spans.map((s) => ms(s.end)).filter((t) => t !== null);
  const start = starts.length > 0 ? Math.min(...starts) : 0;
  const end = Math.max(start + 1, ...ends);
  const total = end - start;
  const pct = (/** @type {number} */ t) => Math.min(100, Math.max(0, ((t - start) / total) * 100));
  /** @type {SpanRow[]} */
  const rows = [];
  const seen = new Set();
  /** @param {Span} s @param {number} depth */
  const visit = (s, depth) => {
    if (seen.has(s.span_id)) {
      return; // a cycle in what was recorded: each span once
    }
    seen.add(s.span_id);
    const b = ms(s.start) ?? start;
    const e = Math.max(b, ms(s.end) ?? b);
    rows.push({
      id: s.span_id, parent: s.parent_span_id ?? "", name: s.name, service: s.service, kind: s.kind, error: s.error, depth,
      left: pct(b), width: Math.max(pct(e) - pct(b), 0), startMs: b - start, durationMs: e - b, attributes: s.attributes ?? {},
    });
    for (const c of [...(children.get(s.span_id) ?? [])].sort(byStart)) {
      visit(c, depth + 1);
    }
  };
  for (const r of [...roots].sort(byStart)) {
    visit(r, 0);
  }
  // Spans whose parents make a cycle (never from onejob): shown as roots.
  for (const s of [...spans].sort(byStart)) {
    visit(s, 0);
  }
  return { start, end, rows };
}

/** The attributes a span's row names, when it has them. */
const SHOWN = ["onejob.attempt", "gen_ai.provider.name", "gen_ai.request.model", "onejob.outcome", "error.type"];

/**
 * Wires the trace part of the job view.
 * @param {import("./page.mjs").Page} page
 */
export function wireTrace(page) {
  const { doc, state, $, button, api } = page;
  /** The job whose trace is shown, and the read in flight. */
  let shown = { id: "", abort: new AbortController() };

  button("trace-refresh").addEventListener("click", () => {
    if (shown.id) {
      void showTrace(shown.id);
    }
  });

  /**
   * Reads the job's trace and draws it.
   * @param {string} id
   */
  async function showTrace(id) {
    shown.abort.abort();
    shown = { id, abort: new AbortController() };
    const mine = shown;
    const note = $("trace-note");
    let t;
    try {
      t = /** @type {JobTrace} */ ((await api("GET", `v1/jobs/${encodeURIComponent(id)}/trace`, { signal: mine.abort.signal })).body);
    } catch (err) {
      if (mine.abort.signal.aborted || shown !== mine) {
        return;
      }
      // Not the operator's problem: a deployment that keeps no spans says
      // where to read them.
      note.textContent = err instanceof ApiError ? (err.problem.detail ?? err.problem.title ?? "no trace") : String(err);
      $("trace").dataset.count = "0";
      $("trace-spans").replaceChildren();
      return;
    }
    if (shown !== mine || state.open?.job.id !== id) {
      return;
    }
    renderTrace(t);
  }

  /** @param {JobTrace} t */
  function renderTrace(t) {
    const layout = layoutSpans(t.spans);
    $("trace").dataset.count = String(layout.rows.length);
    $("trace").dataset.traceId = t.trace_id ?? "";
    $("trace-note").textContent = !t.trace_id
      ? "this job keeps no trace (created with tracing off and no traceparent)"
      : `trace ${t.trace_id}: ${layout.rows.length} span${layout.rows.length === 1 ? "" : "s"} over ${formatDuration(layout.end - layout.start)}` +
        `${t.truncated ? " (the first 1000)" : ""}; spans come in batches, a few seconds late`;
    $("trace-spans").replaceChildren(...layout.rows.map((r) => {
      const bar = el(doc, "div", { cls: "bar" });
      bar.style.left = `${r.left}%`;
      bar.style.width = `${r.width}%`;
      const named = SHOWN.filter((k) => r.attributes[k]).map((k) => `${k.replace(/^.*\./, "")} ${r.attributes[k]}`);
      const label = `${r.name} (${r.service}${r.error ? ", failed" : ""}), +${formatDuration(r.startMs)}, ` +
        `${formatDuration(r.durationMs)}${named.length > 0 ? `, ${named.join(", ")}` : ""}`;
      const time = el(doc, "span", { cls: "lane-time", text: formatDuration(r.durationMs) });
      // Beside the bar: after it, else before it.
      if (r.left + r.width <= 82) {
        time.style.left = `calc(${r.left + r.width}% + 6px)`;
      } else {
        time.style.right = `calc(${100 - r.left}% + 6px)`;
      }
      const name = el(doc, "span", { cls: "span-name", text: r.name });
      name.style.paddingLeft = `${r.depth * 12}px`;
      return el(doc, "li", {
        cls: `span${r.error ? " failed" : ""}`,
        attrs: {
          "data-span": r.id, "data-parent": r.parent, "data-name": r.name, "data-service": r.service, "data-kind": r.kind,
          "data-depth": String(r.depth), "data-error": String(r.error), "aria-label": label, title: label,
        },
      }, [
        el(doc, "div", { cls: "lane-label", attrs: { "aria-hidden": "true" } }, [
          name, el(doc, "span", { cls: "muted", text: r.service.replace(/^onejob-/, "") }),
        ]),
        el(doc, "div", { cls: "track", attrs: { "aria-hidden": "true" } }, [bar, time]),
      ]);
    }));
  }

  function closeTrace() {
    shown.abort.abort();
    shown = { id: "", abort: new AbortController() };
    $("trace-spans").replaceChildren();
    $("trace-note").textContent = "";
    $("trace").dataset.count = "0";
  }

  return { showTrace, closeTrace };
}
