/** How a request that got no usable answer is retried. */
export interface RetryPolicy {
  /** Tries in all, the first included. */
  maxAttempts: number;
  /** The backoff's first ceiling, in milliseconds; it doubles per retry. */
  baseDelayMs: number;
  /** The ceiling's ceiling. */
  maxDelayMs: number;
}

export const defaultRetryPolicy: RetryPolicy = { maxAttempts: 6, baseDelayMs: 250, maxDelayMs: 10_000 };

/**
 * The pause before retry number `retry` (0 for the first): "full jitter"
 * exponential backoff, uniform in [0, min(max, base·2^retry)), so clients
 * that failed together do not come back together; but never shorter than
 * the server's Retry-After.
 */
export function backoffDelay(retry: number, policy: RetryPolicy, random: () => number, retryAfterMs?: number): number {
  const ceiling = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** retry);
  const jittered = Math.floor(random() * ceiling);
  return retryAfterMs === undefined ? jittered : Math.max(jittered, retryAfterMs);
}

/**
 * Reads Retry-After (RFC 9110 §10.2.3): delay-seconds or an HTTP-date, as
 * milliseconds from now; undefined when absent or unreadable.
 */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | undefined {
  if (value === null || value.trim() === "") {
    return undefined;
  }
  const v = value.trim();
  if (/^\d+$/.test(v)) {
    return Number(v) * 1000;
  }
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/** Resolves after ms, or rejects with the signal's reason once it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
