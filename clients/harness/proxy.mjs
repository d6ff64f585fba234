// A loopback HTTP proxy between a client (Node's fetch or Chromium) and the
// local API, to make the network fail the way it does in the field:
// swallow an answer the server already gave (the request reached it, the
// connection dies before the response), hold answers back, or answer 503
// itself. Everything else passes through unchanged, preflights included.
import http from "node:http";

export async function startProxy(target) {
  const upstream = new URL(target);
  const agent = new http.Agent({ keepAlive: true });
  const rules = [];
  const seen = [];

  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const entry = { method: req.method, path: req.url, headers: req.headers, body: body.toString("utf8"), status: 0, fate: "passed" };
      seen.push(entry);
      const rule = rules.find((r) => r.remaining > 0 && r.match(entry));
      if (rule) {
        rule.remaining--;
      }
      if (rule?.kind === "fail") {
        entry.status = rule.status;
        entry.fate = "failed";
        rule.onMatch(entry);
        res.writeHead(rule.status, rule.headers);
        res.end(rule.body);
        return;
      }
      const up = http.request({
        host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers, agent,
      }, (ures) => {
        const uchunks = [];
        ures.on("data", (c) => uchunks.push(c));
        ures.on("end", async () => {
          const ubody = Buffer.concat(uchunks);
          entry.status = ures.statusCode;
          entry.responseBody = ubody.toString("utf8");
          if (rule?.kind === "swallow") {
            // The server answered; the client never hears it.
            entry.fate = "swallowed";
            rule.onMatch(entry);
            req.socket.destroy();
            return;
          }
          if (rule?.kind === "hold") {
            entry.fate = "held";
            rule.onMatch(entry);
            await rule.released;
          }
          if (res.destroyed || req.socket.destroyed) {
            return; // the client went away meanwhile (a reload)
          }
          const headers = { ...ures.headers };
          res.writeHead(ures.statusCode, headers);
          res.end(ubody);
        });
      });
      up.on("error", (err) => {
        entry.status = 502;
        entry.fate = "upstream error: " + err.message;
        if (!res.headersSent) {
          res.writeHead(502);
        }
        res.end();
      });
      up.end(body);
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}`;

  // A rule acts on the next `count` matching requests (Infinity: until
  // stop()); its handle tells when n of them were acted on.
  function addRule(kind, match, count, extra = {}) {
    const rule = { kind, match, remaining: count, matched: [], waiters: [], ...extra };
    rule.onMatch = (entry) => {
      rule.matched.push(entry);
      rule.waiters = rule.waiters.filter((w) => (rule.matched.length >= w.n ? (w.resolve(rule.matched), false) : true));
    };
    rules.push(rule);
    return {
      matched: rule.matched,
      /** Resolves once n matching requests were acted on. */
      after(n = 1) {
        return rule.matched.length >= n ? Promise.resolve(rule.matched) : new Promise((resolve) => rule.waiters.push({ n, resolve }));
      },
      stop() {
        rule.remaining = 0;
      },
    };
  }

  return {
    url,
    /** Every request seen, in order, with what the server answered and what the client got. */
    requests: seen,
    /**
     * The next `count` matching requests reach the server; their answers
     * are dropped with the connection.
     */
    swallow(match, count = 1) {
      return addRule("swallow", match, count);
    },
    /**
     * The next `count` matching requests reach the server; their answers
     * are held until release() (after(n): n answers are in).
     */
    hold(match, count = 1) {
      let release;
      const released = new Promise((r) => (release = r));
      return { ...addRule("hold", match, count, { released }), release };
    },
    /** The next `count` matching requests are answered by the proxy itself. */
    fail(match, count, status, headers = {}, body = "") {
      return addRule("fail", match, count, { status, headers, body });
    },
    /** Stops matching any rule still waiting. */
    clear() {
      rules.length = 0;
    },
    async close() {
      server.closeAllConnections?.();
      agent.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** Matches a job create. */
export const isCreate = (e) => e.method === "POST" && e.path === "/v1/jobs";
