import t from 'tap';
import { Counter, Histogram, Registry } from 'prom-client';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { createLogger } from '@headway/core';
import { MemoryTrimmer } from '../src/index.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

function metrics() {
  const registry = new Registry();
  return {
    memoryTrimSeconds: new Histogram({ name: 'trim_seconds', help: 'h', registers: [registry] }),
    memoryTrimmedBytes: new Counter({ name: 'trimmed_bytes', help: 'h', registers: [registry] }),
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

t.test('a major collection leads to one trim, and trims keep the minimum interval', async (t) => {
  const trims: number[] = [];
  const logs: string[] = [];
  const m = metrics();
  const trimmer = new MemoryTrimmer({
    trim: () => { trims.push(performance.now()); return true; },
    logger: createLogger({ level: 'debug', write: (l) => logs.push(l) }), metrics: m, delayMs: 20, minIntervalMs: 600,
  });
  t.teardown(() => trimmer.stop());

  gc();
  gc();
  for (let i = 0; i < 50 && trims.length === 0; i++) await sleep(20);
  t.equal(trims.length, 1, 'two collections in a row: one trim');
  t.equal((await m.memoryTrimSeconds.get()).values.find((v) => v.metricName === 'trim_seconds_count')?.value, 1, 'the trim is timed');

  // Within the interval a collection arranges the next trim for when the interval is over, not before.
  gc();
  await sleep(200);
  t.equal(trims.length, 1, 'no second trim inside the interval');
  for (let i = 0; i < 100 && trims.length === 1; i++) await sleep(20);
  t.equal(trims.length, 2, 'the collection inside the interval is trimmed after it');
  t.ok(trims[1] - trims[0] >= 600, `not before the interval was over (${Math.round(trims[1] - trims[0])} ms after the first)`);

  trimmer.stop();
  gc();
  await sleep(700);
  t.equal(trims.length, 2, 'a stopped trimmer trims no more');
});

t.test('trimNow reports what the trim gave back', async (t) => {
  const m = metrics();
  const trimmer = new MemoryTrimmer({ trim: () => false, logger: createLogger({ level: 'error', write: () => undefined }), metrics: m });
  t.teardown(() => trimmer.stop());
  const released = trimmer.trimNow();
  t.ok(released >= 0, 'a byte count');
  t.equal((await m.memoryTrimmedBytes.get()).values[0]?.value, released, 'counted');
});
