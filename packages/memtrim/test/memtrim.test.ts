import t from 'tap';
import { readFileSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { ADDON_PATH, loadMemoryTrim } from '../src/index.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** heapResidentKiB is what the brk heap (glibc's main arena) holds in memory, from /proc/self/smaps. */
function heapResidentKiB(): number {
  const smaps = readFileSync('/proc/self/smaps', 'utf8');
  const at = smaps.search(/ \[heap\]\n/);
  if (at < 0) return 0;
  return Number(/\nRss:\s+(\d+) kB/.exec(smaps.slice(at))?.[1] ?? 0);
}

const loaded = loadMemoryTrim();
const unavailable = 'unavailable' in loaded ? loaded.unavailable : undefined;
// CI builds the addon (scripts/build-sqlite.sh) on glibc: there it must load.
const skip = unavailable && process.env.CI !== 'true' ? `${unavailable} (bash scripts/build-sqlite.sh builds it)` : false;

t.test('the addon loads on glibc', { skip }, async (t) => {
  t.equal(unavailable, undefined, `loads from ${ADDON_PATH}`);
});

t.test('free pages between live allocations go back to the system', { skip: skip || unavailable !== undefined }, async (t) => {
  if ('unavailable' in loaded) return;
  // The pattern a join burst leaves: large short-lived buffers, each followed by a small one that stays.
  // glibc cannot shrink its heap past the small ones, so without a trim the large ones' pages stay resident.
  const stay: Buffer[] = [];
  let go: Buffer[] = [];
  for (let i = 0; i < 2048; i++) {
    go.push(Buffer.allocUnsafeSlow(32 * 1024).fill(i & 0xff));
    stay.push(Buffer.allocUnsafeSlow(96).fill(1));
  }
  go = [];
  gc();
  gc();
  loaded.trim();
  const before = heapResidentKiB();
  // Again, now that the first trim has measured from a clean start.
  for (let i = 0; i < 2048; i++) {
    go.push(Buffer.allocUnsafeSlow(32 * 1024).fill(i & 0xff));
    stay.push(Buffer.allocUnsafeSlow(96).fill(1));
  }
  const grown = heapResidentKiB();
  go = [];
  gc();
  gc();
  const freed = heapResidentKiB();
  const released = loaded.trim();
  const after = heapResidentKiB();
  t.ok(grown - before > 32 * 1024, `64 MiB of buffers grew the heap (${before} -> ${grown} KiB)`);
  t.ok(freed - after > 32 * 1024, `trim gave back most of what the freed buffers held (${freed} -> ${after} KiB after freeing)`);
  t.equal(released, true, 'trim says it released memory');
  t.equal(stay.length, 4096, 'the small buffers stayed live throughout');
});
