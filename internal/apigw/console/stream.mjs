// @ts-check
// The console's view of a job's answer as it forms: a job created with
// "stream": true is read at the stream_url its view names (the stream
// function's own origin, which the console's policy lets it call), as
// server-sent events over fetch, each attempt's text growing in its own
// row, an attempt's text struck through once it is dropped, until the
// final event. A dropped connection is resumed after the last event
// received (Last-Event-ID), after a pause that doubles up to 5 s; after 8
// failures in a row the view gives up on the stream (the job itself is
// still followed with held GETs).

import { el, pause } from "./page.mjs";

/** @typedef {import("./page.mjs").Job} Job */
/** @typedef {import("./page.mjs").Page} Page */
/** @typedef {{type: string, data: string, id: string}} SSEEvent */
/**
 * @typedef {{attempt: number, provider: string, hedge: boolean, fallback: boolean, text: string, seq: number,
 *   discarded?: string}} AttemptText
 */

/**
 * Server-sent events from text as it arrives, as the HTML standard parses
 * them: lines end in CRLF, LF or CR; comments and unknown fields are
 * ignored; an event without data is not dispatched; the last event ID is
 * kept across events.
 */
export class SSEParser {
  constructor() {
    this.buf = "";
    /** @type {string[]} */
    this.data = [];
    this.type = "";
    this.lastId = "";
  }

  /**
   * Takes the next piece of the stream; returns the events it completed.
   * @param {string} chunk
   * @returns {SSEEvent[]}
   */
  feed(chunk) {
    this.buf += chunk;
    /** @type {SSEEvent[]} */
    const out = [];
    for (;;) {
      const m = /\r\n|\n|\r/.exec(this.buf);
      if (!m || (m[0] === "\r" && m.index === this.buf.length - 1)) {
        break; // no whole line yet (a CR at the end may be half a CRLF)
      }
      const line = this.buf.slice(0, m.index);
      this.buf = this.buf.slice(m.index + m[0].length);
      if (line === "") {
        if (this.data.length > 0) {
          out.push({ type: this.type || "message", data: this.data.join("\n"), id: this.lastId });
        }
        this.data = [];
        this.type = "";
        continue;
      }
      if (line.startsWith(":")) {
        continue;
      }
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) {
        value = value.slice(1);
      }
      if (field === "event") {
        this.type = value;
      } else if (field === "data") {
        this.data.push(value);
      } else if (field === "id" && !value.includes("\0")) {
        this.lastId = value;
      }
    }
    return out;
  }
}

/**
 * Applies one event of a job's stream to its attempts' texts (by number):
 * a delta is appended to its attempt's text, in seq order; an attempt
 * discarded keeps its text, marked. Returns the final event's job, or
 * null; throws on a delta out of order (text repeated or missing).
 * @param {Map<number, AttemptText>} attempts
 * @param {SSEEvent} ev
 * @returns {Job | null}
 */
export function applyStreamEvent(attempts, ev) {
  const d = JSON.parse(ev.data);
  switch (ev.type) {
    case "attempt.started":
      attempts.set(d.attempt, { attempt: d.attempt, provider: d.provider, hedge: Boolean(d.hedge), fallback: Boolean(d.fallback), text: "", seq: 0 });
      return null;
    case "output.delta": {
      const a = attempts.get(d.attempt);
      if (!a || d.seq !== a.seq + 1) {
        throw new Error(`attempt ${d.attempt}: delta ${d.seq} after ${a?.seq ?? "none"}`);
      }
      a.seq = d.seq;
      a.text += d.text;
      return null;
    }
    case "attempt.discarded": {
      const a = attempts.get(d.attempt);
      if (a) {
        a.discarded = d.reason;
      }
      return null;
    }
    case "job.succeeded":
    case "job.failed":
    case "job.cancelled":
      return /** @type {Job} */ (d);
  }
  return null;
}

/**
 * Wires the stream's part of the job view.
 * @param {Page} page
 */
export function wireStream(page) {
  const { doc, state, $ } = page;

  /**
   * Follows the open job's stream, when it was created with "stream":
   * true, until its final event or until the job is closed.
   * @param {{job: Job, abort: AbortController}} open
   */
  async function streamJob(open) {
    const box = $("job-stream");
    const url = open.job.stream_url;
    box.hidden = !open.job.stream || !url;
    if (box.hidden || !url) {
      return;
    }
    const signal = open.abort.signal;
    /** @type {Map<number, AttemptText>} */
    const attempts = new Map();
    let after = "";
    let reconnects = 0;
    let wait = 250;
    const stateText = (/** @type {string} */ t) => {
      $("job-stream-state").textContent = t;
      box.dataset.reconnects = String(reconnects);
    };
    const render = () => {
      $("job-stream-attempts").replaceChildren(...[...attempts.values()].map((a) =>
        el(doc, "li", { attrs: { "data-attempt": String(a.attempt), "data-discarded": a.discarded ?? "", "data-seq": String(a.seq) } }, [
          el(doc, "div", { cls: "stream-head", text: `#${a.attempt} ${a.provider}${a.hedge ? " (hedge)" : a.fallback ? " (fallback)" : ""}` +
            (a.discarded ? `: dropped (${a.discarded})` : "") }),
          el(doc, "pre", { cls: "stream-text", text: a.text || "…" }),
        ])));
    };
    render();
    stateText("connecting…");
    while (!signal.aborted) {
      /** @type {Record<string, string>} */
      const headers = { Authorization: `Bearer ${state.token}`, Accept: "text/event-stream" };
      if (after) {
        headers["Last-Event-ID"] = after;
      }
      let got = false;
      try {
        const resp = await fetch(url, { headers, signal, cache: "no-store", credentials: "omit", redirect: "error" });
        if (resp.status === 204) {
          stateText("ended");
          return;
        }
        if (resp.status !== 200 || !resp.body) {
          throw new Error(`the stream answered ${resp.status}`);
        }
        stateText("live");
        const parser = new SSEParser();
        const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) {
            break;
          }
          for (const ev of parser.feed(value)) {
            const final = applyStreamEvent(attempts, ev);
            after = ev.id;
            got = true;
            wait = 250;
            render();
            if (final) {
              box.dataset.final = final.status;
              stateText(`ended: ${final.status}`);
              return;
            }
          }
        }
      } catch (err) {
        if (signal.aborted) {
          return;
        }
        if (err instanceof Error && err.message.startsWith("attempt ")) {
          stateText(`stopped: ${err.message}`);
          return;
        }
      }
      if (!got) {
        if (++reconnects > 8) {
          // The stream cannot be read from here (say, its origin does not
          // list the console's): the job view still follows the job.
          stateText("unavailable: the stream could not be read; the job is still followed");
          return;
        }
        stateText(`reconnecting in ${wait} ms…`);
        await pause(wait, signal);
        wait = Math.min(2 * wait, 5000);
      }
    }
  }

  return { streamJob };
}
