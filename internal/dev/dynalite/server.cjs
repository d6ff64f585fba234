// Starts dynalite (node_modules/dynalite/cli.js, with the same arguments)
// with two fixes and one addition, and optionally on a socket it is given.
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
// The second fix, crash atomicity, is below (makeAtomic).
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
  store = makeAtomic(createStore.apply(this, args));
  const recreate = store.recreate;
  store.recreate = function recreateAtomic() {
    recreate.call(this);
    makeAtomic(this);
  };
  return store;
};

// Crash atomicity. dynalite writes an item's index entries and then the
// item as separate LevelDB writes (actions/putItem.js, updateItem.js,
// deleteItem.js: db.updateIndexes, then itemDb.put or del), so a kill -9
// between them left an index out of step with its table for good: an entry
// whose item was never written (a job listed twice by GET /v1/jobs once its
// unacknowledged create was retried at another time) or an item missing
// from a sparse index (an open job the sweeper never reads). DynamoDB
// never loses an index update. Here updateIndexes only gathers its writes,
// and the item's write that always follows (under the item's lock) goes
// with them in one LevelDB batch, which LevelDB applies whole or not at all.
const updateIndexes = stores.updateIndexes;
if (typeof updateIndexes !== 'function' || typeof stores.createKey !== 'function') {
  throw new Error('dynalite changed: db.updateIndexes or db.createKey is missing');
}
// The operations of the write being gathered: set only around a
// synchronous call, so no other request's write can land in it.
let gathering = null;
function gather(write) {
  const ops = [];
  gathering = ops;
  try {
    write();
  } finally {
    gathering = null;
  }
  // A write that did not reach the store's put or del at once would be
  // lost here: refuse to serve rather than drop index entries.
  if (ops.length !== 1) throw new Error(`dynalite changed: a write gathered ${ops.length} operations, not 1`);
  return ops;
}
// Index operations waiting for their item's write, by table and item key.
const waiting = new Map();
const waitingKey = (table, key) => `${table}\u0000${key}`;
stores.updateIndexes = function gatherIndexes(st, table, existing, item, cb) {
  const ops = [];
  const gatherer = Object.create(st);
  gatherer.getIndexDb = (...args) => {
    const index = st.getIndexDb(...args);
    return {
      put: (key, value, done) => {
        ops.push(...gather(() => index.put(key, value)));
        setImmediate(done);
      },
      del: (key, done) => {
        ops.push(...gather(() => index.del(key)));
        setImmediate(done);
      },
    };
  };
  updateIndexes.call(this, gatherer, table, existing, item, (err) => {
    if (err) return cb(err);
    if (ops.length > 0) waiting.set(waitingKey(table.TableName, stores.createKey(item || existing, table)), ops);
    cb();
  });
};

function makeAtomic(st) {
  const db = st.db;
  if (typeof db?.put !== 'function' || typeof db.del !== 'function' || typeof db.batch !== 'function' ||
    typeof st.getItemDb !== 'function' || typeof st.getIndexDb !== 'function') {
    throw new Error('dynalite changed: its store has no put, del, batch, getItemDb or getIndexDb');
  }
  const put = db.put;
  const del = db.del;
  db.put = function gatheredPut(key, value, cb) {
    if (gathering) return void gathering.push({ type: 'put', key, value });
    return put.call(this, key, value, cb);
  };
  db.del = function gatheredDel(key, cb) {
    if (gathering) return void gathering.push({ type: 'del', key });
    return del.call(this, key, cb);
  };
  const atomic = new WeakSet();
  const getItemDb = st.getItemDb;
  st.getItemDb = function atomicItemDb(name) {
    const items = getItemDb.call(this, name);
    if (atomic.has(items)) return items;
    atomic.add(items);
    const itemPut = items.put;
    const itemDel = items.del;
    const withIndexes = (key, write, cb) => {
      const k = waitingKey(name, key);
      const ops = waiting.get(k);
      if (!ops) return write(cb);
      waiting.delete(k);
      db.batch([...ops, ...gather(() => write())], cb);
    };
    items.put = (key, value, cb) => withIndexes(key, (done) => itemPut.call(items, key, value, done), cb);
    items.del = (key, cb) => withIndexes(key, (done) => itemDel.call(items, key, done), cb);
    return items;
  };
  return st;
}

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
