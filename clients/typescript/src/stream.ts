// A job's stream (GET /v1/jobs/{id}/stream, at the job view's stream_url):
// its answer as it forms, then its end. Read over fetch, so it works in
// browsers, Node and React Native alike: server-sent events parsed from the
// response body (sse.ts), or, where a body cannot be read as it arrives
// (React Native's fetch, a proxy that buffers), the long-poll form. A
// dropped connection is resumed by itself, after a backoff, strictly after
// the last event received (Last-Event-ID), so nothing is repeated or lost.
import { problemOf } from "./client.js";
import { NetworkError } from "./errors.js";
import { backoffDelay, parseRetryAfter, type RetryPolicy } from "./retry.js";
import type { components } from "./schema.js";
import { readSSE } from "./sse.js";
import type { Job } from "./types.js";

export type StreamEventType = components["schemas"]["StreamEventType"];
export type StreamAttemptStarted = components["schemas"]["StreamAttemptStarted"];
export type StreamOutputDelta = components["schemas"]["StreamOutputDelta"];
export type StreamAttemptDiscarded = components["schemas"]["StreamAttemptDiscarded"];
export type StreamPage = components["schemas"]["StreamPage"];

/** The types of the event that ends a stream. */
export type FinalEventType = "job.succeeded" | "job.failed" | "job.cancelled";

/**
 * One event of a job's stream. `id` is opaque: resume after it (the
 * client does so by itself). A delta's text is provisional; the final
 * event's job (exactly what GET /v1/jobs/{id} answers) is the answer.
 */
export type StreamEvent =
  | { id: string; type: "attempt.started"; data: StreamAttemptStarted }
  | { id: string; type: "output.delta"; data: StreamOutputDelta }
  | { id: string; type: "attempt.discarded"; data: StreamAttemptDiscarded }
  | { id: string; type: FinalEventType; data: Job };

/** Whether an event ends its stream (its data is the job). */
export function isFinalEvent(ev: StreamEvent): ev is Extract<StreamEvent, { type: FinalEventType }> {
  return ev.type === "job.succeeded" || ev.type === "job.failed" || ev.type === "job.cancelled";
}

/** How reconnections are spaced: full-jitter backoff, reset by every event received. */
export const defaultReconnectPolicy: RetryPolicy = { maxAttempts: 20, baseDelayMs: 250, maxDelayMs: 5_000 };

/** The server sends a comment every 15 s: three missed mean the connection is dead. */
export const defaultStreamIdleMs = 45_000;

export interface StreamOptions {
  signal?: AbortSignal;
  /** Resume strictly after this event (the id of the last one a previous read received). */
  after?: string;
  /**
   * `sse` reads server-sent events; `poll` the long-poll form (JSON pages);
   * `auto` (the default) reads events and falls back to polling when the
   * response's body cannot be read as it arrives or is not an event stream.
   */
  transport?: "auto" | "sse" | "poll";
  /** How failed connections are retried (maxAttempts: failures in a row before giving up). */
  reconnect?: Partial<RetryPolicy>;
  /** A connection quiet this long (no event, no heartbeat) is dropped and resumed. */
  idleMs?: number;
  /** The long-poll's `wait`, 1 to 20 seconds (20 unless given). */
  waitSeconds?: number;
  /** Told before every reconnection, e.g. to show "reconnecting…". */
  onReconnect?: (info: ReconnectInfo) => void;
}

/** One reconnection about to happen. */
export interface ReconnectInfo {
  /** Failures in a row, from 1; 0 when the server ended a stream that will go on (reconnected at once). */
  attempt: number;
  delayMs: number;
  /** `network`, `idle`, `cut`, `ended` or the HTTP status that asked for a retry. */
  reason: string;
  /** The id the next connection resumes after ("" from the start). */
  after: string;
  transport: "sse" | "poll";
}

/** What the client lends its streams: how it sends and whom it reads as. */
export interface StreamHost {
  fetch: typeof globalThis.fetch;
  token: () => Promise<string>;
  getJob: (id: string, options: { signal?: AbortSignal }) => Promise<Job>;
  random: () => number;
  sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
}

/** A connection that ended without the final event, and why. */
class Dropped extends Error {
  constructor(readonly reason: string, readonly retryAfterMs?: number, readonly opened = false, options?: { cause?: unknown }) {
    super(`stream dropped (${reason})`, options);
  }
}

/** An answer that cannot be read as a stream: read the long-poll form instead. */
class NotAStream extends Error {}

/** Jobs as streams: `for await (const ev of client.jobs.stream(id, { signal }))`. */
export class JobStreams {
  readonly #host: StreamHost;

  constructor(host: StreamHost) {
    this.#host = host;
  }

  /**
   * The job's events, in order, until its final event (job.succeeded,
   * job.failed or job.cancelled, whose data is the job): the attempts as
   * they start, their text as it forms (append a delta to its attempt's
   * text; drop an attempt's text when it is discarded), then the answer.
   * Pass a job (its `stream_url` is read, never built) or its ID (the job
   * is read first). A dropped connection, a 5xx or a 429 is retried after
   * a backoff (never sooner than Retry-After), resuming strictly after the
   * last event received; a stream the server ends early (it bounds each
   * connection) is resumed at once. Other 4xx are thrown as ProblemError;
   * after `reconnect.maxAttempts` failures in a row a NetworkError. Rejects
   * with the signal's reason once it aborts; leaving the loop closes the
   * connection.
   */
  async *stream(job: string | Job, options: StreamOptions = {}): AsyncGenerator<StreamEvent, void, undefined> {
    const signal = options.signal;
    const url = await this.#streamUrl(job, signal);
    const policy = { ...defaultReconnectPolicy, ...options.reconnect };
    const idleMs = options.idleMs ?? defaultStreamIdleMs;
    const waitSeconds = Math.min(20, Math.max(1, Math.floor(options.waitSeconds ?? 20)));
    let transport: "sse" | "poll" = options.transport === "poll" ? "poll" : "sse";
    let after = options.after ?? "";
    let failures = 0;
    let silentOpens = 0; // SSE answers that opened, then died before their first event
    for (;;) {
      signal?.throwIfAborted();
      let got = false;
      let dropped: Dropped;
      try {
        const events = transport === "sse" ? this.#sse(url, after, idleMs, signal) : this.#poll(url, after, waitSeconds, signal);
        for await (const ev of events) {
          got = true;
          failures = 0;
          silentOpens = 0;
          after = ev.id;
          yield ev;
          if (isFinalEvent(ev)) {
            return;
          }
        }
        return; // the server says the stream is over (204, or a page marked done)
      } catch (err) {
        if (signal?.aborted) {
          throw signal.reason;
        }
        if (err instanceof NotAStream && options.transport !== "sse") {
          transport = "poll";
          continue;
        }
        if (!(err instanceof Dropped)) {
          throw err;
        }
        dropped = err;
      }
      if (dropped.reason === "ended" && got) {
        // The server bounds a connection's length: go on at once.
        options.onReconnect?.({ attempt: 0, delayMs: 0, reason: "ended", after, transport });
        continue;
      }
      if (!got && dropped.opened && transport === "sse" && options.transport !== "sse" && ++silentOpens >= 2) {
        // Events never get through (something on the way holds them):
        // read pages instead.
        transport = "poll";
      }
      if (++failures >= policy.maxAttempts) {
        throw new NetworkError(`GET ${url}: the stream could not be resumed after ${failures} tries (${dropped.reason})`, { cause: dropped });
      }
      const delayMs = backoffDelay(failures - 1, policy, this.#host.random, dropped.retryAfterMs);
      options.onReconnect?.({ attempt: failures, delayMs, reason: dropped.reason, after, transport });
      await this.#host.sleep(delayMs, signal);
    }
  }

  /** The job's stream_url, from the job as given or as read. */
  async #streamUrl(job: string | Job, signal: AbortSignal | undefined): Promise<string> {
    const j = typeof job === "string" ? await this.#host.getJob(job, signal ? { signal } : {}) : job;
    if (!j.stream_url) {
      throw new Error(`onejob: job ${j.id} has no stream_url (this deployment serves no streams)`);
    }
    return j.stream_url;
  }

  /**
   * Opens one connection, its own abort linked to the caller's (release
   * unlinks it). A 200 or 204 is returned; a network error, 429 or 5xx is
   * Dropped; any other answer is thrown as a ProblemError.
   */
  async #open(url: string, headers: Record<string, string>, signal: AbortSignal | undefined,
    abort: AbortController): Promise<{ res: Response; release: () => void }> {
    const onAbort = () => abort.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    const release = () => signal?.removeEventListener("abort", onAbort);
    let res: Response;
    try {
      const token = await this.#host.token();
      res = await this.#host.fetch(url, { headers: { Authorization: `Bearer ${token}`, ...headers }, signal: abort.signal, cache: "no-store" });
    } catch (err) {
      release();
      throw new Dropped("network", undefined, false, { cause: err });
    }
    if (res.status === 429 || res.status >= 500) {
      release();
      await res.body?.cancel().catch(() => undefined);
      throw new Dropped(String(res.status), parseRetryAfter(res.headers.get("Retry-After")));
    }
    if (res.status !== 200 && res.status !== 204) {
      release();
      throw await problemOf(res);
    }
    return { res, release };
  }

  /** One SSE connection's events; ends when the server says the stream is over (204). */
  async *#sse(url: string, after: string, idleMs: number, signal: AbortSignal | undefined): AsyncGenerator<StreamEvent, void, undefined> {
    const abort = new AbortController();
    const headers: Record<string, string> = { Accept: "text/event-stream" };
    if (after !== "") {
      headers["Last-Event-ID"] = after;
    }
    const { res, release } = await this.#open(url, headers, signal, abort);
    let idle: ReturnType<typeof setTimeout> | undefined;
    try {
      if (res.status === 204) {
        return;
      }
      const ct = res.headers.get("Content-Type") ?? "";
      if (!ct.toLowerCase().startsWith("text/event-stream") || !res.body || typeof res.body.getReader !== "function") {
        await res.body?.cancel().catch(() => undefined);
        throw new NotAStream("not an event stream");
      }
      let quiet = false;
      const alive = () => {
        clearTimeout(idle);
        idle = setTimeout(() => {
          quiet = true;
          abort.abort(new Error("idle"));
        }, idleMs);
      };
      alive();
      let final = false;
      try {
        for await (const m of readSSE(res.body, alive)) {
          const ev = toEvent(m.type, m.id, m.data);
          if (ev === undefined) {
            continue; // a type this client does not know: skipped, resumed past
          }
          final = isFinalEvent(ev);
          yield ev;
        }
      } catch (err) {
        if (signal?.aborted) {
          throw signal.reason;
        }
        throw new Dropped(quiet ? "idle" : "cut", undefined, true, { cause: err });
      }
      if (!final) {
        throw new Dropped("ended", undefined, true);
      }
    } finally {
      clearTimeout(idle);
      release();
      abort.abort();
    }
  }

  /** The long-poll form: pages of events until one is marked done. */
  async *#poll(url: string, after: string, waitSeconds: number, signal: AbortSignal | undefined): AsyncGenerator<StreamEvent, void, undefined> {
    for (;;) {
      const u = new URL(url);
      u.searchParams.set("wait", String(waitSeconds));
      if (after !== "") {
        u.searchParams.set("after", after);
      }
      const abort = new AbortController();
      const { res, release } = await this.#open(u.toString(), { Accept: "application/json" }, signal, abort);
      let page: StreamPage;
      try {
        if (res.status === 204) {
          return;
        }
        page = (await res.json()) as StreamPage;
      } catch (err) {
        if (signal?.aborted) {
          throw signal.reason;
        }
        throw new Dropped("cut", undefined, true, { cause: err });
      } finally {
        release();
      }
      for (const e of page.events) {
        const ev = toEvent(e.type, e.id, e.data);
        if (ev !== undefined) {
          yield ev;
          if (isFinalEvent(ev)) {
            return;
          }
        }
        after = e.id;
      }
      if (page.done) {
        return;
      }
      after = page.next || after;
    }
  }
}

const knownTypes: readonly string[] = ["attempt.started", "output.delta", "attempt.discarded", "job.succeeded", "job.failed", "job.cancelled"];

/** An event as this client types it; undefined for a type it does not know. */
function toEvent(type: string, id: string, data: unknown): StreamEvent | undefined {
  if (!knownTypes.includes(type)) {
    return undefined;
  }
  const value = typeof data === "string" ? JSON.parse(data) : data;
  return { id, type, data: value } as StreamEvent;
}

/** A delta out of its attempt's order: the stream repeated or lost text (never expected). */
export class StreamOrderError extends Error {
  override readonly name: string = "StreamOrderError";
}

/** One attempt's text as its deltas built it. */
export interface AttemptText {
  attempt: number;
  provider: string;
  hedge: boolean;
  fallback: boolean;
  /** Its text so far: the deltas' texts, appended. */
  text: string;
  /** Its last delta's seq (0: none yet). */
  seq: number;
  /** Why its text was dropped; undefined while it may still be the answer. */
  discarded?: StreamAttemptDiscarded["reason"];
}

/**
 * A job's answer as its stream builds it: each attempt's text (a delta
 * appended to its attempt's, in seq order, or a StreamOrderError), an
 * attempt's text dropped when it is discarded, and the job once the
 * final event came. Feed it every event: `answer.apply(ev)`.
 */
export class StreamedAnswer {
  readonly attempts = new Map<number, AttemptText>();
  /** The final event's job; undefined until then. */
  job: Job | undefined;

  apply(ev: StreamEvent): void {
    switch (ev.type) {
      case "attempt.started": {
        const d = ev.data;
        if (this.attempts.has(d.attempt)) {
          throw new StreamOrderError(`attempt ${d.attempt} started twice`);
        }
        this.attempts.set(d.attempt, { attempt: d.attempt, provider: d.provider, hedge: d.hedge, fallback: d.fallback, text: "", seq: 0 });
        return;
      }
      case "output.delta": {
        const a = this.#attempt(ev.data.attempt);
        if (a.discarded !== undefined || ev.data.seq !== a.seq + 1) {
          throw new StreamOrderError(`attempt ${a.attempt}: delta ${ev.data.seq} after ${a.seq}${a.discarded ? " (discarded)" : ""}`);
        }
        a.seq = ev.data.seq;
        a.text += ev.data.text;
        return;
      }
      case "attempt.discarded":
        this.#attempt(ev.data.attempt).discarded = ev.data.reason;
        return;
      default:
        this.job = ev.data;
    }
  }

  #attempt(n: number): AttemptText {
    const a = this.attempts.get(n);
    if (!a) {
      throw new StreamOrderError(`an event of attempt ${n} before it started`);
    }
    return a;
  }

  /** The attempt whose text to show: of those not discarded, the one furthest along (the lowest on a tie). */
  get leading(): AttemptText | undefined {
    let best: AttemptText | undefined;
    for (const a of this.attempts.values()) {
      if (a.discarded === undefined && (best === undefined || a.text.length > best.text.length)) {
        best = a;
      }
    }
    return best;
  }

  /** The provisional text: the leading attempt's ("" when none). */
  get text(): string {
    return this.leading?.text ?? "";
  }
}
