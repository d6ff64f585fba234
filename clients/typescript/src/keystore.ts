import type { CreateJobRequest } from "./types.js";

/**
 * What the client keeps per intent, from before the first send until the
 * app forgets the intent: the idempotency key, the body it was first sent
 * with (or last accepted with), and the job once the server named one.
 */
export interface StoredIntent {
  key: string;
  body: CreateJobRequest;
  jobId?: string;
  /** When the key was made (ISO 8601). */
  createdAt: string;
}

/**
 * Where intents live between calls, page reloads and app restarts. Every
 * method may be synchronous or return a promise, so `localStorage`, a file,
 * or a React Native store (AsyncStorage, MMKV, SQLite) can back it.
 */
export interface KeyStore {
  get(intent: string): StoredIntent | undefined | Promise<StoredIntent | undefined>;
  set(intent: string, value: StoredIntent): void | Promise<void>;
  delete(intent: string): void | Promise<void>;
}

/** Intents in memory: they live as long as the process or page. */
export class MemoryKeyStore implements KeyStore {
  readonly #intents = new Map<string, StoredIntent>();

  get(intent: string): StoredIntent | undefined {
    const v = this.#intents.get(intent);
    return v === undefined ? undefined : structuredClone(v);
  }

  set(intent: string, value: StoredIntent): void {
    this.#intents.set(intent, structuredClone(value));
  }

  delete(intent: string): void {
    this.#intents.delete(intent);
  }
}

/**
 * The Web Storage shape, which React Native's AsyncStorage shares (with
 * promises): `window.localStorage` and `AsyncStorage` both fit.
 */
export interface StringStorage {
  getItem(key: string): string | null | Promise<string | null>;
  setItem(key: string, value: string): void | Promise<void>;
  removeItem(key: string): void | Promise<void>;
}

/**
 * Intents in a string store, one JSON item per intent under a prefix:
 * `new StorageKeyStore(localStorage)` in a browser, `new
 * StorageKeyStore(AsyncStorage)` in a React Native app, so keys survive
 * reloads and restarts.
 */
export class StorageKeyStore implements KeyStore {
  readonly #storage: StringStorage;
  readonly #prefix: string;

  constructor(storage: StringStorage, prefix = "onejob.intent.") {
    this.#storage = storage;
    this.#prefix = prefix;
  }

  async get(intent: string): Promise<StoredIntent | undefined> {
    const raw = await this.#storage.getItem(this.#prefix + intent);
    if (raw === null) {
      return undefined;
    }
    const v: unknown = JSON.parse(raw);
    if (!isStoredIntent(v)) {
      throw new Error(`onejob: stored intent ${intent} is not one this client wrote`);
    }
    return v;
  }

  async set(intent: string, value: StoredIntent): Promise<void> {
    await this.#storage.setItem(this.#prefix + intent, JSON.stringify(value));
  }

  async delete(intent: string): Promise<void> {
    await this.#storage.removeItem(this.#prefix + intent);
  }
}

/** Whether v has the shape of a StoredIntent (what a store hands back). */
export function isStoredIntent(v: unknown): v is StoredIntent {
  if (typeof v !== "object" || v === null) {
    return false;
  }
  const o = v as Record<string, unknown>;
  return typeof o["key"] === "string" && typeof o["createdAt"] === "string" &&
    typeof o["body"] === "object" && o["body"] !== null &&
    (o["jobId"] === undefined || typeof o["jobId"] === "string");
}
