/// <reference types="node" />
// Node additions: intents in a file, so a CLI or a server process resumes
// them after a restart.
import { randomBytes } from "node:crypto";
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { dirname } from "node:path";

import { isStoredIntent, type KeyStore, type StoredIntent } from "./keystore.js";

export * from "./index.js";

/**
 * Intents in one JSON file (mode 0600), rewritten atomically (a temporary
 * file renamed over it) so a crash never leaves half a file. One process
 * at a time should own the file.
 */
export class FileKeyStore implements KeyStore {
  readonly #path: string;
  #queue: Promise<unknown> = Promise.resolve();

  constructor(path: string) {
    this.#path = path;
  }

  get(intent: string): Promise<StoredIntent | undefined> {
    return this.#serial(async () => (await this.#read())[intent]);
  }

  set(intent: string, value: StoredIntent): Promise<void> {
    return this.#serial(async () => {
      const all = await this.#read();
      all[intent] = value;
      await this.#write(all);
    });
  }

  delete(intent: string): Promise<void> {
    return this.#serial(async () => {
      const all = await this.#read();
      if (intent in all) {
        delete all[intent];
        await this.#write(all);
      }
    });
  }

  #serial<T>(f: () => Promise<T>): Promise<T> {
    const next = this.#queue.then(f, f);
    this.#queue = next.catch(() => undefined);
    return next;
  }

  async #read(): Promise<Record<string, StoredIntent>> {
    let raw: string;
    try {
      raw = await readFile(this.#path, "utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") {
        return {};
      }
      throw err;
    }
    const all: unknown = JSON.parse(raw);
    if (typeof all !== "object" || all === null || Array.isArray(all)) {
      throw new Error(`onejob: ${this.#path} is not a key store file`);
    }
    const out: Record<string, StoredIntent> = {};
    for (const [k, v] of Object.entries(all)) {
      if (!isStoredIntent(v)) {
        throw new Error(`onejob: ${this.#path}: intent ${k} is not one this client wrote`);
      }
      out[k] = v;
    }
    return out;
  }

  async #write(all: Record<string, StoredIntent>): Promise<void> {
    await mkdir(dirname(this.#path), { recursive: true });
    const tmp = `${this.#path}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`;
    await writeFile(tmp, JSON.stringify(all, null, 2) + "\n", { mode: 0o600 });
    await rename(tmp, this.#path);
  }
}
