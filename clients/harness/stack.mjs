// Starts the real local stack (`bin/onejob run`: dynalite, the real state
// machine, the task handlers, the simulated providers, the HTTP API) on
// free loopback ports for the client and browser tests, and stops it by
// its PID. No mocks: the tests talk to what `make run` serves.
import { spawn, execFile } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

/** The checkout root (clients/harness/../..). */
export const root = fileURLToPath(new URL("../../", import.meta.url));

/** Where tests leave logs and screenshots: git-ignored. */
export const outDir = join(root, ".local", "clients-test");

const run = promisify(execFile);

/**
 * Starts `onejob run` with the API on a free port. Resolves once it printed
 * that it is up, with its URLs (streamUrl: where jobs' streams are
 * served), a token minter and stop(). args are more flags for onejob run
 * (e.g. --stream-url, to name a proxy in front of the stream port).
 */
export async function startStack(name, { args = [] } = {}) {
  const bin = process.env.ONEJOB_BIN ?? join(root, "bin", "onejob");
  if (!existsSync(bin)) {
    throw new Error(`${bin} is missing: run the client tests with \`make test-clients\`, which builds it`);
  }
  mkdirSync(outDir, { recursive: true });
  const logPath = join(outDir, `${name}.stack.log`);
  // Breakers off: the tests script provider failures job by job, and a
  // breaker opened by one test's timeouts would reroute the next test's jobs.
  const child = spawn(bin, ["run", "--log", logPath, "--breakers", "off", ...args], {
    cwd: root,
    // ONEJOB_AWS_CALLS_DIR (set by `make test`) passes through: the stack
    // records its functions' AWS calls there, labelled with the test's name.
    env: { ...process.env, ONEJOB_ADDR: "127.0.0.1:0", ONEJOB_AWS_CALLS_SOURCE: `clients:${name}` },
    stdio: ["ignore", "pipe", "pipe"],
    detached: true, // its own process group, so nothing it starts outlives a crashed test
  });
  const killGroup = () => {
    try {
      process.kill(-child.pid, "SIGKILL");
    } catch {
      // already gone
    }
  };
  process.once("exit", killGroup);
  let out = "";
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const up = await new Promise((resolve, reject) => {
    const onData = (b) => {
      out += b;
      const api = /HTTP API\s+(http:\/\/\S+)/.exec(out);
      if (api && out.includes("Ctrl-C stops everything")) {
        child.stdout.off("data", onData);
        // The operator console's link, as printed: the admin token in its fragment.
        const consoleLink = /^\s+console\s+(http:\/\/\S+\/console#token=\S+)$/m.exec(out);
        // The secret its tokens are signed with, as printed (a new one each run).
        const secret = /^\s+ONEJOB_LOCAL_JWT_SECRET=(\S+) /m.exec(out);
        // Where the stream port listens (job views name --stream-url when given).
        const streams = /job streams\s+(http:\/\/\S+)[^\n]*(?:\n\s+served at (http:\/\/\S+))?/.exec(out);
        resolve({ apiUrl: api[1], streamUrl: streams?.[2] ?? streams?.[1] ?? "", consoleUrl: consoleLink?.[1] ?? "", secret: secret?.[1] ?? "" });
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", (b) => (out += b));
    exited.then(({ code, signal }) => reject(new Error(`onejob run exited (${code ?? signal}) before it was up:\n${out}\n(logs: ${logPath})`)));
  });
  if (!up.secret) {
    killGroup();
    throw new Error(`onejob run printed no signing secret:\n${out}`);
  }
  const env = { ...process.env, ONEJOB_LOCAL_JWT_SECRET: up.secret };
  return {
    ...up,
    logPath,
    /** The URL of a local page, as `make run` prints it, calling api (default: the stack's). */
    pageUrl(page, { api = up.apiUrl, token }) {
      const origin = up.apiUrl.replace("://127.0.0.1:", "://localhost:");
      return `${origin}/${page}/#api=${encodeURIComponent(api)}&token=${token}`;
    },
    /** A bearer token for sub, from `onejob token` with the secret the stack printed. */
    async token(sub, ...scopes) {
      const args = ["token", "--sub", sub, ...scopes.flatMap((s) => ["--scope", s])];
      const { stdout } = await run(bin, args, { env });
      return stdout.trim();
    },
    /** Ctrl-C, as a person would; the whole group is killed if that does not end it. */
    async stop() {
      process.off("exit", killGroup);
      if (child.exitCode !== null || child.signalCode !== null) {
        return;
      }
      child.kill("SIGINT");
      const timer = setTimeout(killGroup, 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
