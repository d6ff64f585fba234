// Starts dynalite (node_modules/dynalite/cli.js, with the same arguments)
// with one fix. dynalite 4.0.0 stops a LevelDB iterator early — every Query
// or Scan that ends at its Limit or at 1 MB, such as each page of a listing
// — by calling iterator.return(), which abstract-level 3 iterators do not
// have: each such request left its iterator open, with the native memory
// and the snapshot it holds (about 30 KB a request, on disk and in memory
// alike). The fix gives abstract-level's iterators a return() that closes
// them. If a dynalite or abstract-level upgrade changes the classes, start
// fails here instead of leaking again.
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

require('dynalite/cli.js');
