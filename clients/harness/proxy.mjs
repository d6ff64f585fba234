// A loopback HTTP proxy between a client (Node's fetch or Chromium) and the
// local API (or the local stream port), to make the network fail the way it
// does in the field: swallow an answer the server already gave (the request
// reached it, the connection dies before the response), hold answers back,
// answer 503 itself, sever a stream mid-way, or cut the network altogether
// until it is restored. Everything else passes through unchanged,
// preflights included; an event stream (text/event-stream) as it arrives.
import http from "node:http";

/** Starts the proxy in front of target (or of retarget()'s, given later). */
export async function startProxy(target) {
  let upstream = target ? new URL(target) : undefined;
  const agent = new http.Agent({ keepAlive: true });
  const rules = [];
  const seen = [];
  // The network: while it is cut, every connection is dropped as it comes.
  let down = false;
  let refused = 0;
  const sockets = new Set();
  const ups = new Set();

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
        if ((ures.headers["content-type"] ?? "").startsWith("text/event-stream") && rule?.kind !== "swallow" && rule?.kind !== "hold") {
          // An event stream goes on as it arrives; a sever rule cuts it
          // where its at() says, the connection dropped mid-answer.
          entry.status = ures.statusCode;
          entry.responseBody = "";
          res.writeHead(ures.statusCode, ures.headers);
          res.flushHeaders();
          const sever = rule?.kind === "sever" ? rule : undefined;
          let severed = false;
          ures.on("data", (c) => {
            if (res.destroyed || severed) {
              return;
            }
            const text = c.toString("utf8");
            const cut = sever?.at(entry.responseBody + text);
            if (cut !== undefined && cut >= entry.responseBody.length) {
              const head = (entry.responseBody + text).slice(entry.responseBody.length, cut);
              entry.responseBody += head;
              entry.fate = "severed";
              severed = true;
              sever.onMatch(entry);
              res.write(head, () => {
                req.socket.destroy();
                up.destroy();
              });
              return;
            }
            entry.responseBody += text;
            res.write(c);
          });
          ures.on("end", () => res.end());
          ures.on("error", () => req.socket.destroy());
          res.on("close", () => up.destroy());
          return;
        }
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
      ups.add(up);
      up.on("close", () => ups.delete(up));
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
  server.on("connection", (socket) => {
    if (down) {
      refused++;
      socket.destroy();
      return;
    }
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
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
    /**
     * The next `count` matching event streams are cut: at(text) is given
     * the stream's text so far and names the length to pass on before the
     * connection drops (undefined: not yet).
     */
    sever(match, count, at) {
      return addRule("sever", match, count, { at });
    },
    /** Cuts the network: every open connection dies, every new one is dropped, until restore(). */
    cut() {
      down = true;
      for (const s of sockets) {
        s.destroy();
      }
      for (const u of ups) {
        u.destroy();
      }
    },
    /** How many connections a cut network has dropped as they came. */
    get refused() {
      return refused;
    },
    /** Connections get through again. */
    restore() {
      down = false;
    },
    /** Points the proxy at target (when it starts before what it fronts). */
    retarget(target) {
      upstream = new URL(target);
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
