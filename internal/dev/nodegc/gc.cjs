// A full garbage collection on request, for the local node servers
// (dynalite's wrapper, the Step Functions server) started with
// --expose-gc. The soak drill collects before it reads a server's resident
// memory, so that the reading is what the server keeps, not garbage V8 has
// not yet swept: without it the Step Functions server's RSS swung between
// 117 and 164 MiB from one batch to the next with nothing retained. Leaked
// objects are reachable and survive a collection, so a leak still shows.
'use strict';

const { setImmediate: nextTurn } = require('node:timers/promises');

/** The path both servers answer, POST only. */
const gcPath = '/control/gc';

/**
 * Runs settle (if given: background work of the server's own to finish
 * first, such as dynalite's LevelDB compaction), then a full collection
 * twice, a turn of the event loop apart (the first one's freed pages are
 * returned to the system by its concurrent sweep), and returns the
 * process's memory afterwards.
 */
async function collectGarbage(settle) {
  if (typeof globalThis.gc !== 'function') {
    throw new Error('node was started without --expose-gc');
  }
  if (settle) await settle();
  globalThis.gc();
  await nextTurn();
  globalThis.gc();
  const m = process.memoryUsage();
  return { rss_bytes: m.rss, heap_used_bytes: m.heapUsed };
}

/**
 * Answers POST /control/gc on res; false when req is another request.
 * settle is passed on to collectGarbage.
 */
function serveGC(req, res, settle) {
  if (req.method !== 'POST' || new URL(req.url, 'http://localhost').pathname !== gcPath) return false;
  req.resume();
  collectGarbage(settle).then(
    (mem) => reply(res, 200, mem),
    (err) => reply(res, 501, { message: err.message }),
  );
  return true;
}

function reply(res, status, body) {
  const payload = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) });
  res.end(payload);
}

module.exports = { serveGC };
