// The client's wire types are generated from the API's contract: this fails
// when clients/typescript/src/schema.ts no longer matches
// internal/apigw/openapi.yaml (regenerate with `make client-schema`).
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";

import { root } from "../../harness/stack.mjs";

test("schema.ts is what openapi-typescript makes of openapi.yaml", async () => {
  const out = join(await mkdtemp(join(tmpdir(), "onejob-schema-")), "schema.ts");
  await promisify(execFile)(process.execPath, [join(root, "node_modules", "openapi-typescript", "bin", "cli.js"),
    join(root, "internal", "apigw", "openapi.yaml"), "-o", out], { cwd: root });
  const want = await readFile(out, "utf8");
  const got = await readFile(join(root, "clients", "typescript", "src", "schema.ts"), "utf8");
  assert.ok(got === want, "clients/typescript/src/schema.ts is stale: run `make client-schema`");
});
