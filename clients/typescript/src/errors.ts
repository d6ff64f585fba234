import type { Problem } from "./types.js";

/** The stable problem type URIs the API answers with (RFC 9457). */
export const problemBase = "https://onejob.dev/problems/";

/**
 * An error answer of the API: a problem document, or what API Gateway itself
 * answers (its 401 `{"message":"Unauthorized"}`, 429 and 5xx bodies), read as
 * one with type `about:blank`.
 */
export class ProblemError extends Error {
  override readonly name: string = "ProblemError";
  /** The HTTP status. */
  readonly status: number;
  /** The problem type URI; match on this (or `code`), never on titles. */
  readonly type: string;
  /** The type's last segment, e.g. `idempotency-key-reused`; "" for about:blank. */
  readonly code: string;
  /** Quote it when reporting a problem; "" when the gateway answered alone. */
  readonly requestId: string;
  readonly problem: Problem | undefined;

  constructor(status: number, problem: Problem | undefined, fallback?: string) {
    super(problem ? `${problem.title}: ${problem.detail}` : fallback ?? `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
    this.type = problem?.type ?? "about:blank";
    this.code = this.type.startsWith(problemBase) ? this.type.slice(problemBase.length) : "";
    this.requestId = problem?.request_id ?? "";
  }
}

/**
 * The intent's key already names a job created from a different request:
 * the same intent was sent with edited input. Not retryable: show the
 * existing job (`jobId`), or forget the intent and submit the edit as a new
 * one.
 */
export class IdempotencyKeyReusedError extends ProblemError {
  override readonly name: string = "IdempotencyKeyReusedError";
  /** The job the intent's key already names. */
  readonly jobId: string;

  constructor(status: number, problem: Problem) {
    super(status, problem);
    this.jobId = problem.job_id ?? "";
  }
}

/**
 * No answer came back (connection refused, reset, or dropped before the
 * response) after every retry. The request may have reached the server:
 * retrying the same intent is always safe, it resends the same key.
 */
export class NetworkError extends Error {
  override readonly name: string = "NetworkError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}
