// Starts dynalite (node_modules/dynalite/cli.js, with the same arguments)
// with one fix and one addition, and optionally on a socket it is given.
//
// The fix: dynalite 4.0.0 stops a LevelDB iterator early — every Query or
// Scan that ends at its Limit or at 1 MB, such as each page of a listing —
// by calling iterator.return(), which abstract-level 3 iterators do not
// have: each such request left its iterator open, with the native memory
// and the snapshot it holds (about 30 KB a request, on disk and in memory
// alike). The fix gives abstract-level's iterators a return() that closes
// them. If a dynalite or abstract-level upgrade changes the classes, start
// fails here instead of leaking again.
//
// The addition: POST /control/gc compacts LevelDB (on disk), then runs a
// full collection (../nodegc/gc.cjs); it never reaches dynalite's handler.
'use strict';

const { createRequire } = require('node:module');

const fromDynalite = createRequire(require.resolve('dynalite/package.json'));
const fromLevel = createRequire(fromDynalite.resolve('level'));
// Both stores dynalite may use (classic-level on disk, memory-level in
// memory) build their iterators on abstract-level; patch each copy found.
const copies = new Set();
for (const store of ['classic-level', 'memory-level']) {
  const req = createRequire(store === 'memory-level' ? fromDynalite.resolve(store) : fromLevel.resolve(store));
  copies.add(req.resolve('abstract-level'));
}
for (const file of copies) {
  const lib = require(file);
  for (const name of ['AbstractIterator', 'AbstractKeyIterator', 'AbstractValueIterator']) {
    const proto = lib[name]?.prototype;
    if (typeof proto?.close !== 'function') throw new Error(`abstract-level changed: ${name}.prototype.close is missing in ${file}`);
    if (typeof proto.return !== 'function') {
      proto.return = function closeOnReturn() {
        return this.close();
      };
    }
  }
}

// dynalite builds its server with http.createServer(handler); the wrapper
// answers the collection request and hands everything else on.
const http = require('node:http');
const { serveGC } = require('../nodegc/gc.cjs');
const createServer = http.createServer;
//
// It also keeps dynalite alive when a client gives up on a request while
// sending its body: dynalite's handler rethrows the request's error
// (index.js: req.on('error', function (err) { throw err })), so one
// client that aborted (ECONNRESET 'aborted': a held request cancelled, a
// test that ended) killed the server under every other client, who then
// saw only connections refused. Such a request is left unanswered: its
// client is gone.
http.createServer = function createServerWithGC(...args) {
  const handler = args.pop();
  return createServer.call(this, ...args, (req, res) => {
    if (serveGC(req, res, settle)) return;
    handler(req, res);
    req.removeAllListeners('error');
    req.on('error', (err) => {
      process.stderr.write(`dynalite: a request ended early (${err.code || err.message}): its client is gone\n`);
    });
  });
};

// The store dynalite creates, kept so that a collection can first let
// LevelDB finish compacting: a reading taken during a compaction counts
// its buffers and the pages of the files it maps (up to a third more RSS).
const stores = require('dynalite/db');
let store;
const createStore = stores.create;
stores.create = function createKept(...args) {
  store = createStore.apply(this, args);
  return store;
};
async function settle() {
  if (!store?.options) throw new Error('dynalite changed: its store was not seen');
  if (!store.options.path) return; // in memory: nothing to compact
  const db = store.db;
  if (typeof db?.compactRange !== 'function') throw new Error('dynalite changed: its store has no LevelDB compactRange');
  // The whole key space: dynalite's keys are strings, which encode below
  // eight 0xff bytes.
  await db.compactRange(Buffer.alloc(0), Buffer.alloc(8, 0xff), { keyEncoding: 'buffer' });
}

// With --fd N, serve on the listening socket the parent bound and passed
// (so its port cannot be taken by another server between being chosen and
// being bound); otherwise start as dynalite's own cli.js does.
const argv = fromDynalite('minimist')(process.argv.slice(2));
if (argv.fd === undefined) {
  require('dynalite/cli.js');
} else {
  const server = require('dynalite')(argv).listen({ fd: Number(argv.fd) }, () => {
    console.log('Dynalite listening at: http://%s:%s', argv.host || 'localhost', server.address().port);
  });
}
