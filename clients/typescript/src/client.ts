import { IdempotencyKeyReusedError, NetworkError, ProblemError, problemBase } from "./errors.js";
import { MemoryKeyStore, type KeyStore, type StoredIntent } from "./keystore.js";
import { backoffDelay, defaultRetryPolicy, parseRetryAfter, sleep, type RetryPolicy } from "./retry.js";
import { JobStreams } from "./stream.js";
import { isTerminal, type AttemptList, type CreateJobRequest, type DeliveryList, type Job, type JobList, type JobStatus, type Problem } from "./types.js";

/** The server holds a waiting request at most this long (openapi.yaml). */
export const maxWaitSeconds = 20;

export interface ClientOptions {
  /** The API's base URL, e.g. `https://abc123.execute-api.eu-west-1.amazonaws.com`. */
  baseUrl: string;
  /** A bearer token, or a function giving a current one for each request. */
  token: string | (() => string | Promise<string>);
  /** Where intents are kept; in memory unless given (see StorageKeyStore). */
  keyStore?: KeyStore;
  /** The fetch to use; the global one unless given. */
  fetch?: typeof globalThis.fetch;
  /** How requests without a usable answer are retried. */
  retry?: Partial<RetryPolicy>;
  /** The backoff's jitter; Math.random unless given (keys never use it). */
  random?: () => number;
  /** How the client pauses between tries; tests pass one that records. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Makes an idempotency key; 128 bits of crypto.getRandomValues unless given. */
  newKey?: () => string;
  /** The `Prefer: wait=N` of wait(), from 1 to 20; 20 unless given. */
  waitSeconds?: number;
  /** Told before every retry, e.g. to show "retrying…". */
  onRetry?: (retry: RetryInfo) => void;
  /**
   * The W3C traceparent a create carries (called for each submit): the
   * app's current span, from its OpenTelemetry, so the job's trace is a
   * child of the click that made it; or newTraceparent, to start one per
   * submit. None unless given (onejob then starts the job's trace itself
   * when it traces).
   */
  traceparent?: () => string | undefined;
}

/** One retry about to happen. */
export interface RetryInfo {
  method: string;
  path: string;
  /** The try that failed, from 1. */
  attempt: number;
  delayMs: number;
  /** `network` or the HTTP status that asked for a retry. */
  reason: string;
}

/** What submit() returns. */
export interface Submission {
  job: Job;
  /** True when the server already had the job: an earlier send of this intent reached it. */
  replayed: boolean;
  intent: string;
  key: string;
}

export interface CallOptions {
  signal?: AbortSignal;
}

export interface WaitOptions extends CallOptions {
  /** Called with every new representation of the job, the first included. */
  onUpdate?: (job: Job) => void;
  /** Overrides the client's waitSeconds. */
  waitSeconds?: number;
}

export interface ListQuery {
  status?: JobStatus;
  limit?: number;
  cursor?: string;
}

/**
 * The client half of onejob's contract. An intent is what a user means
 * once, named by the app (a form's or a cart's ID): the first submit of it
 * makes and stores an idempotency key with the body before anything is
 * sent, and every later submit of it (a second click, a retry, the same
 * intent after a reload or an app restart) sends that same key, so the
 * server creates one job. Forget the intent once its job is over and the
 * user is done with it.
 */
export class OnejobClient {
  readonly #baseUrl: string;
  readonly #token: ClientOptions["token"];
  readonly #store: KeyStore;
  readonly #fetch: typeof globalThis.fetch;
  readonly #retry: RetryPolicy;
  readonly #random: () => number;
  readonly #sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  readonly #newKey: () => string;
  readonly #waitSeconds: number;
  readonly #onRetry: ((retry: RetryInfo) => void) | undefined;
  readonly #traceparent: (() => string | undefined) | undefined;
  /** Per intent, the making of its key in progress (one key per intent, even for concurrent submits). */
  readonly #making = new Map<string, Promise<StoredIntent>>();
  /**
   * Jobs' answers as they form: `for await (const ev of
   * client.jobs.stream(id, { signal }))` (stream.ts).
   */
  readonly jobs: JobStreams;

  constructor(options: ClientOptions) {
    if (!options.baseUrl) {
      throw new TypeError("onejob: baseUrl is required");
    }
    this.#baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.#token = options.token;
    this.#store = options.keyStore ?? new MemoryKeyStore();
    const f = options.fetch ?? globalThis.fetch;
    if (typeof f !== "function") {
      throw new TypeError("onejob: no fetch; pass one");
    }
    this.#fetch = (input, init) => f(input, init); // unbound window.fetch throws "Illegal invocation"
    this.#retry = { ...defaultRetryPolicy, ...options.retry };
    if (this.#retry.maxAttempts < 1) {
      throw new RangeError("onejob: retry.maxAttempts must be at least 1");
    }
    this.#random = options.random ?? Math.random;
    this.#sleep = options.sleep ?? sleep;
    this.#newKey = options.newKey ?? randomKey;
    this.#waitSeconds = clampWait(options.waitSeconds ?? maxWaitSeconds);
    this.#onRetry = options.onRetry;
    this.#traceparent = options.traceparent;
    this.jobs = new JobStreams({
      fetch: this.#fetch,
      token: async () => (typeof this.#token === "function" ? await this.#token() : this.#token),
      getJob: (id, o) => this.getJob(id, o),
      random: this.#random,
      sleep: this.#sleep,
    });
  }

  /**
   * Creates the intent's job, or gets it back if an earlier send of the
   * intent already created it. Retries network errors, 5xx and 429 with
   * exponential backoff and full jitter (never sooner than Retry-After),
   * always with the intent's one key; any other 4xx is thrown at once as a
   * ProblemError, and a body that differs from the one the key already
   * named as an IdempotencyKeyReusedError carrying that job's ID.
   *
   * The body may be left out for an intent that is stored (resuming after a
   * reload or restart): the stored one is sent.
   */
  async submit(intent: string, body?: CreateJobRequest, options: CallOptions = {}): Promise<Submission> {
    const stored = await this.#intentFor(intent, body);
    const sent = body ?? stored.body;
    const headers: Record<string, string> = { "Content-Type": "application/json", "Idempotency-Key": stored.key };
    const traceparent = this.#traceparent?.();
    if (traceparent) {
      headers["traceparent"] = traceparent;
    }
    const res = await this.#request("POST", "/v1/jobs", {
      headers,
      body: JSON.stringify(sent),
      signal: options.signal,
    });
    if (res.status !== 201 && res.status !== 200) {
      throw await problemOf(res);
    }
    const job = (await res.json()) as Job;
    // The key now names this body on the server: keep them together.
    await this.#store.set(intent, { ...stored, body: sent, jobId: job.id });
    return { job, replayed: res.headers.get("Idempotent-Replayed") === "true", intent, key: stored.key };
  }

  /** The stored intent, if the app has not forgotten it: after a reload, resume it with submit(intent). */
  async intent(intent: string): Promise<StoredIntent | undefined> {
    return await this.#store.get(intent);
  }

  /**
   * Drops the intent and its key: the next submit of this name is a new
   * intent and creates a new job. Call it once the job is terminal and the
   * user has seen the outcome, or when the user starts over.
   */
  async forget(intent: string): Promise<void> {
    await this.#store.delete(intent);
  }

  /** One of the caller's jobs. */
  async getJob(id: string, options: CallOptions = {}): Promise<Job> {
    const res = await this.#request("GET", jobPath(id), { signal: options.signal });
    if (res.status !== 200) {
      throw await problemOf(res);
    }
    return (await res.json()) as Job;
  }

  /** The job's attempts, oldest first. */
  async attempts(id: string, options: CallOptions = {}): Promise<AttemptList> {
    const res = await this.#request("GET", jobPath(id) + "/attempts", { signal: options.signal });
    if (res.status !== 200) {
      throw await problemOf(res);
    }
    return (await res.json()) as AttemptList;
  }

  /** The job's webhook deliveries (one per event and endpoint), each with every try. */
  async deliveries(id: string, options: CallOptions = {}): Promise<DeliveryList> {
    const res = await this.#request("GET", jobPath(id) + "/deliveries", { signal: options.signal });
    if (res.status !== 200) {
      throw await problemOf(res);
    }
    return (await res.json()) as DeliveryList;
  }

  /** A page of the caller's jobs, newest first, each without its input (get() has it). */
  async listJobs(query: ListQuery = {}, options: CallOptions = {}): Promise<JobList> {
    const q = new URLSearchParams();
    if (query.status !== undefined) q.set("status", query.status);
    if (query.limit !== undefined) q.set("limit", String(query.limit));
    if (query.cursor !== undefined) q.set("cursor", query.cursor);
    const qs = q.toString();
    const res = await this.#request("GET", "/v1/jobs" + (qs ? "?" + qs : ""), { signal: options.signal });
    if (res.status !== 200) {
      throw await problemOf(res);
    }
    return (await res.json()) as JobList;
  }

  /**
   * Resolves with the job once it is terminal, calling onUpdate with every
   * representation that differs from the last. It waits on the server
   * (ETag + If-None-Match + Prefer: wait), so a job that does not change
   * costs one request per waitSeconds, and a change arrives within half a
   * second; a server that does not hold requests is polled at its
   * Retry-After instead. Rejects with the signal's reason once it aborts.
   */
  async wait(jobId: string, options: WaitOptions = {}): Promise<Job> {
    const n = clampWait(options.waitSeconds ?? this.#waitSeconds);
    let etag: string | undefined;
    for (;;) {
      const headers: Record<string, string> = {};
      if (etag !== undefined) {
        headers["If-None-Match"] = etag;
        headers["Prefer"] = `wait=${n}`;
      }
      const res = await this.#request("GET", jobPath(jobId), { headers, signal: options.signal });
      if (res.status === 200) {
        const job = (await res.json()) as Job;
        const tag = res.headers.get("ETag") ?? undefined;
        if (tag === undefined || tag !== etag) {
          options.onUpdate?.(job);
        }
        etag = tag;
        if (isTerminal(job.status)) {
          return job;
        }
      } else if (res.status !== 304) {
        throw await problemOf(res);
      }
      const held = etag !== undefined && headers["Prefer"] !== undefined && res.headers.get("Preference-Applied") !== null;
      if (!held && (etag === undefined || headers["Prefer"] !== undefined)) {
        // Nothing held this request (no ETag to wait on, or a server or
        // proxy that ignores Prefer): poll politely.
        await this.#sleep(parseRetryAfter(res.headers.get("Retry-After")) ?? 2000, options.signal);
      }
    }
  }

  /** The intent's stored key and body, made and stored before the first send. */
  async #intentFor(intent: string, body: CreateJobRequest | undefined): Promise<StoredIntent> {
    if (!intent) {
      throw new TypeError("onejob: an intent needs a name");
    }
    const making = this.#making.get(intent);
    if (making) {
      return await making;
    }
    const p = (async () => {
      const stored = await this.#store.get(intent);
      if (stored) {
        return stored;
      }
      if (!body) {
        throw new Error(`onejob: intent ${intent} is not stored; pass its body`);
      }
      const fresh: StoredIntent = { key: this.#newKey(), body, createdAt: new Date().toISOString() };
      await this.#store.set(intent, fresh);
      return fresh;
    })();
    this.#making.set(intent, p);
    try {
      return await p;
    } finally {
      this.#making.delete(intent);
    }
  }

  /**
   * Sends one request, retrying when no usable answer came: a network
   * error, a 5xx or a 429. Every other answer is the caller's to read.
   */
  async #request(method: string, path: string, init: { headers?: Record<string, string>; body?: string; signal?: AbortSignal | undefined }): Promise<Response> {
    const url = this.#baseUrl + path;
    for (let attempt = 1; ; attempt++) {
      init.signal?.throwIfAborted();
      let failure: Error;
      let reason: string;
      let retryAfter: number | undefined;
      try {
        const token = typeof this.#token === "function" ? await this.#token() : this.#token;
        const req: RequestInit = { method, headers: { Authorization: `Bearer ${token}`, ...init.headers } };
        if (init.body !== undefined) req.body = init.body;
        if (init.signal !== undefined) req.signal = init.signal;
        const res = await this.#fetch(url, req);
        if (res.status !== 429 && res.status < 500) {
          return res;
        }
        reason = String(res.status);
        retryAfter = parseRetryAfter(res.headers.get("Retry-After"));
        failure = await problemOf(res);
      } catch (err) {
        if (init.signal?.aborted) {
          throw init.signal.reason;
        }
        reason = "network";
        failure = new NetworkError(`${method} ${path}: no answer (${describe(err)})`, { cause: err });
      }
      if (attempt >= this.#retry.maxAttempts) {
        throw failure;
      }
      const delayMs = backoffDelay(attempt - 1, this.#retry, this.#random, retryAfter);
      this.#onRetry?.({ method, path, attempt, delayMs, reason });
      await this.#sleep(delayMs, init.signal);
    }
  }
}

/** Reads an error answer as a typed error. */
export async function problemOf(res: Response): Promise<ProblemError> {
  let body: unknown;
  try {
    body = await res.json();
  } catch {
    body = undefined;
  }
  if (isProblem(body)) {
    if (body.type === problemBase + "idempotency-key-reused") {
      return new IdempotencyKeyReusedError(res.status, body);
    }
    return new ProblemError(res.status, body);
  }
  const message = typeof body === "object" && body !== null && typeof (body as { message?: unknown }).message === "string"
    ? (body as { message: string }).message : undefined;
  return new ProblemError(res.status, undefined, message === undefined ? `HTTP ${res.status}` : `HTTP ${res.status}: ${message}`);
}

function isProblem(v: unknown): v is Problem {
  if (typeof v !== "object" || v === null) {
    return false;
  }
  const o = v as Record<string, unknown>;
  return typeof o["type"] === "string" && typeof o["status"] === "number" && typeof o["title"] === "string";
}

function jobPath(id: string): string {
  return "/v1/jobs/" + encodeURIComponent(id);
}

function clampWait(n: number): number {
  return Math.min(maxWaitSeconds, Math.max(1, Math.floor(n)));
}

function describe(err: unknown): string {
  if (err instanceof Error) {
    const cause = err.cause instanceof Error ? `: ${err.cause.message}` : "";
    return err.message + cause;
  }
  return String(err);
}

/**
 * An idempotency key: 128 bits from the platform's cryptographic random
 * source (a UUIDv4 has 122), hex-encoded. Never Math.random.
 */
export function randomKey(): string {
  const c = globalThis.crypto;
  if (typeof c?.getRandomValues !== "function") {
    throw new Error("onejob: crypto.getRandomValues is missing; pass newKey (e.g. from expo-crypto)");
  }
  const b = c.getRandomValues(new Uint8Array(16));
  return "ik_" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/**
 * A new W3C traceparent: version 00, 128 random bits of trace ID, 64 of
 * span ID, sampled. Pass it as ClientOptions.traceparent to start a trace
 * for each submit when the app has no tracing of its own.
 */
export function newTraceparent(): string {
  const hex = (n: number) => {
    const b = new Uint8Array(n);
    crypto.getRandomValues(b);
    return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  };
  let trace = hex(16);
  let span = hex(8);
  // All-zero IDs are invalid (W3C Trace Context); astronomically unlikely.
  while (/^0+$/.test(trace)) trace = hex(16);
  while (/^0+$/.test(span)) span = hex(8);
  return `00-${trace}-${span}-01`;
}
