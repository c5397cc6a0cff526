import t from 'tap';
import { createLogger } from '@headway/core';
import { HeapReducer, memoryReducingGc, REDUCE_MIN_GROWTH_BYTES, REDUCE_QUIET_CHECKS } from '../src/heap-reducer.js';

const MiB = 2 ** 20;
const logger = createLogger({ level: 'error', write: () => undefined });

/** fleet is a reducer on a heap and an event loop the test sets, with every collection counted. */
function fleet(startHeap: number) {
  const s = { heap: startHeap, busy: 0, collections: 0, collectTo: startHeap };
  const reducer = new HeapReducer({
    collect: () => { s.collections++; s.heap = s.collectTo; },
    heapCommitted: () => s.heap,
    utilization: () => s.busy,
    logger, interval: null,
  });
  const quietFor = (checks: number) => { s.busy = 0; let ran = 0; for (let i = 0; i < checks; i++) if (reducer.check()) ran++; return ran; };
  // Start-up's garbage is the first burst: its reduction is taken here, so each test starts from a settled heap.
  quietFor(REDUCE_QUIET_CHECKS);
  s.collections = 0;
  return { s, reducer, quietFor };
}

t.test('start-up counts as the first burst: a heap of REDUCE_MIN_GROWTH_BYTES or more is reduced once the server is quiet', async (t) => {
  const s = { heap: 45 * MiB, collections: 0 };
  const reducer = new HeapReducer({
    collect: () => { s.collections++; s.heap = 30 * MiB; }, heapCommitted: () => s.heap, utilization: () => 0.01, logger, interval: null,
  });
  for (let i = 0; i < 3 * REDUCE_QUIET_CHECKS; i++) reducer.check();
  t.equal(s.collections, 1, 'once');
  t.equal(s.heap, 30 * MiB);
  const small = new HeapReducer({ collect: () => t.fail('no collection'), heapCommitted: () => REDUCE_MIN_GROWTH_BYTES - 1, utilization: () => 0, logger, interval: null });
  for (let i = 0; i < 3 * REDUCE_QUIET_CHECKS; i++) t.notOk(small.check(), 'a heap smaller than the threshold is left alone');
});

t.test('a burst\'s heap is collected once the loop has been quiet long enough', async (t) => {
  const { s, reducer, quietFor } = fleet(40 * MiB);
  s.heap = 200 * MiB; s.collectTo = 60 * MiB;
  s.busy = 0.9;
  for (let i = 0; i < 20; i++) t.notOk(reducer.check(), 'not while the loop is busy');
  t.equal(quietFor(REDUCE_QUIET_CHECKS - 1), 0, 'not before the quiet readings are in');
  t.equal(quietFor(1), 1, 'then once');
  t.equal(s.heap, 60 * MiB);
  t.equal(quietFor(50), 0, 'and not again while nothing grows');
});

t.test('a busy reading starts the quiet count again', async (t) => {
  const { s, reducer, quietFor } = fleet(40 * MiB);
  s.heap = 200 * MiB;
  t.equal(quietFor(REDUCE_QUIET_CHECKS - 1), 0);
  s.busy = 0.5;
  t.notOk(reducer.check());
  t.equal(quietFor(REDUCE_QUIET_CHECKS - 1), 0, 'the earlier quiet readings no longer count');
  t.equal(quietFor(1), 1);
});

t.test('growth below the threshold is left to V8; growth counts from where V8 shrank the heap to', async (t) => {
  const { s, quietFor } = fleet(100 * MiB);
  s.heap = 100 * MiB + REDUCE_MIN_GROWTH_BYTES - 1;
  t.equal(quietFor(30), 0, 'too little growth for a pause');
  s.heap = 50 * MiB;
  t.equal(quietFor(3), 0, 'V8 shrank it itself');
  s.heap = 50 * MiB + REDUCE_MIN_GROWTH_BYTES;
  s.collectTo = 55 * MiB;
  t.equal(quietFor(REDUCE_QUIET_CHECKS), 1, 'growth from the lower baseline is enough');
  s.heap = 55 * MiB + REDUCE_MIN_GROWTH_BYTES;
  t.equal(quietFor(REDUCE_QUIET_CHECKS), 1, 'a second burst later is collected again');
  t.equal(s.collections, 2);
});

t.test('the memory-reducing collection gives a burst\'s pages back to the system', async (t) => {
  const collect = memoryReducingGc();
  collect();
  const before = process.memoryUsage().heapTotal;
  let keep: object[] = [];
  for (let r = 0; r < 20; r++) { keep = []; for (let i = 0; i < 100_000; i++) keep.push({ i, s: `x${i}`, a: [i] }); }
  keep = [];
  const grown = process.memoryUsage().heapTotal;
  t.ok(grown - before > 16 * MiB, `the burst grew the heap (${Math.round(before / MiB)} -> ${Math.round(grown / MiB)} MiB)`);
  collect();
  const after = process.memoryUsage().heapTotal;
  t.ok(after < before + (grown - before) / 2, `most of it is given back (${Math.round(grown / MiB)} -> ${Math.round(after / MiB)} MiB)`);
  t.equal(keep.length, 0);
});
