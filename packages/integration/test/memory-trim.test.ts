import t from 'tap';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { startTestServer } from '../src/server.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

// The server gives the C heap's free pages back after collections through @headway/memtrim; CI builds it.
t.test('the server trims the C heap after a major collection', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop({ remove: true }));
  const trimmer = s.memoryTrimmer;
  if (!trimmer) {
    const why = s.logs.find((l) => l.includes('free C memory stays with the process')) ?? 'no reason logged';
    if (process.env.CI === 'true') t.fail(`no memory trimmer: ${why}`);
    else t.comment(`skipped: no memory trimmer (bash scripts/build-sqlite.sh builds @headway/memtrim): ${why}`);
    return;
  }
  const count = async () => {
    const text = await (await fetch(s.urls.metrics + '/metrics')).text();
    return Number(/^headway_memory_trim_seconds_count (\d+)/m.exec(text)?.[1] ?? NaN);
  };
  const before = await count();
  t.ok(before >= 0, 'the trim metrics are exported');
  gc();
  // The first trim follows 1 s after the collection (another may have run already: then within 10 s).
  let after = before;
  for (let i = 0; i < 240 && after === before; i++) {
    await new Promise((r) => setTimeout(r, 50));
    after = await count();
  }
  t.ok(after > before, `a trim ran after the collection (${before} -> ${after})`);
});
