// Verifying onejob's webhook deliveries (Standard Webhooks v1): the
// receiver's half of the contract. WebCrypto only, so it runs in Node,
// browsers' service workers, edge runtimes and React Native with a crypto
// polyfill alike.
import type { components } from "./schema.js";

/** The body of every delivery: the event's type, when it happened, and the job as its owner sees it. */
export type WebhookEvent = components["schemas"]["Event"];
export type WebhookEventType = components["schemas"]["EventType"];

/** How far a delivery's timestamp may be from the receiver's clock, either way. */
export const defaultWebhookToleranceSeconds = 5 * 60;

/** Why a delivery was refused. */
export class WebhookVerificationError extends Error {
  override readonly name = "WebhookVerificationError";
}

/** Headers as fetch (Headers), Node's http (IncomingHttpHeaders) or a plain object carry them. */
export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

export interface VerifyWebhookOptions {
  /** The clock, in milliseconds since the epoch; Date.now when absent. */
  now?: () => number;
  /** Tolerance in seconds; defaultWebhookToleranceSeconds when absent. */
  toleranceSeconds?: number;
}

function header(headers: WebhookHeaders, name: string): string | undefined {
  if (typeof (headers as Headers).get === "function") {
    return (headers as Headers).get(name) ?? undefined;
  }
  const record = headers as Record<string, string | string[] | undefined>;
  for (const [k, v] of Object.entries(record)) {
    if (k.toLowerCase() === name) {
      return Array.isArray(v) ? v.join(", ") : v;
    }
  }
  return undefined;
}

function fromBase64(s: string): Uint8Array<ArrayBuffer> {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(s) || s.length % 4 !== 0) {
    throw new WebhookVerificationError("not base64");
  }
  const bin = atob(s);
  const out = new Uint8Array(new ArrayBuffer(bin.length));
  for (let i = 0; i < bin.length; i++) {
    out[i] = bin.charCodeAt(i);
  }
  return out;
}

function toBase64(b: Uint8Array): string {
  let s = "";
  for (const x of b) {
    s += String.fromCharCode(x);
  }
  return btoa(s);
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) {
    return false;
  }
  let diff = 0;
  for (let i = 0; i < a.length; i++) {
    diff |= (a[i] ?? 0) ^ (b[i] ?? 0);
  }
  return diff === 0;
}

/** The signature "v1,<base64 HMAC-SHA256>" of body sent as message id at timestamp (Unix seconds). */
export async function signWebhook(secret: string, id: string, timestamp: number, body: string | Uint8Array): Promise<string> {
  const key = fromBase64(secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret);
  if (key.length === 0) {
    throw new WebhookVerificationError("empty secret");
  }
  const prefix = new TextEncoder().encode(`${id}.${timestamp}.`);
  const payload = typeof body === "string" ? new TextEncoder().encode(body) : body;
  const content = new Uint8Array(new ArrayBuffer(prefix.length + payload.length));
  content.set(prefix, 0);
  content.set(payload, prefix.length);
  const k = await crypto.subtle.importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", k, content));
  return `v1,${toBase64(mac)}`;
}

/**
 * Verifies a delivery over the exact body received (never re-serialised
 * JSON) and returns its event: the webhook-timestamp must be within the
 * tolerance and one of the webhook-signature's v1 signatures must match.
 * Dedupe on the webhook-id header: the same on every try of an event.
 * Throws WebhookVerificationError otherwise.
 */
export async function verifyWebhook(secret: string, headers: WebhookHeaders, body: string | Uint8Array,
  options: VerifyWebhookOptions = {}): Promise<WebhookEvent> {
  const id = header(headers, "webhook-id");
  const ts = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  if (!id || !ts || !signatures) {
    throw new WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature");
  }
  if (!/^[0-9]{1,12}$/.test(ts)) {
    throw new WebhookVerificationError("invalid webhook-timestamp");
  }
  const timestamp = Number(ts);
  const now = Math.floor((options.now ?? Date.now)() / 1000);
  const tolerance = options.toleranceSeconds ?? defaultWebhookToleranceSeconds;
  if (now - timestamp > tolerance) {
    throw new WebhookVerificationError("timestamp too old");
  }
  if (timestamp - now > tolerance) {
    throw new WebhookVerificationError("timestamp too new");
  }
  const want = fromBase64((await signWebhook(secret, id, timestamp, body)).slice(3));
  let matched = false;
  for (const s of signatures.split(" ")) {
    const [version, sig] = s.split(",", 2);
    if (version !== "v1" || sig === undefined) {
      continue;
    }
    let got: Uint8Array;
    try {
      got = fromBase64(sig);
    } catch {
      continue;
    }
    if (sameBytes(got, want)) {
      matched = true;
    }
  }
  if (!matched) {
    throw new WebhookVerificationError("no signature matches");
  }
  const text = typeof body === "string" ? body : new TextDecoder().decode(body);
  return JSON.parse(text) as WebhookEvent;
}
