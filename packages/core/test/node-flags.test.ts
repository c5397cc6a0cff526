import t from 'tap';
import { resolveConfig } from '../src/config/load.js';
import { nodeOptionsArgs, SERVER_SEMI_SPACE_MB, serverNodeFlags } from '../src/node-flags.js';

const memory = (heap_limit_mb: number) => ({ memory: { heap_limit_mb } });

t.test('the server gets its semi-space, and the old generation only when memory.heap_limit_mb is set', async (t) => {
  t.same(serverNodeFlags(memory(0), []), [`--max-semi-space-size=${SERVER_SEMI_SPACE_MB}`]);
  t.same(serverNodeFlags(memory(512), []), [`--max-semi-space-size=${SERVER_SEMI_SPACE_MB}`, '--max-old-space-size=512']);
});

t.test('an option the operator gave is left alone, however it is spelled', async (t) => {
  t.same(serverNodeFlags(memory(512), ['--max-semi-space-size=16']), ['--max-old-space-size=512']);
  t.same(serverNodeFlags(memory(512), ['--max_old_space_size=1024', '--inspect']), [`--max-semi-space-size=${SERVER_SEMI_SPACE_MB}`]);
  t.same(serverNodeFlags(memory(512), ['--max-semi-space-size=4', '--max-old-space-size=99']), [], 'nothing to add');
});

t.test('memory.heap_limit_mb: a number of MiB, 0 by default; anything else is an error naming the key', async (t) => {
  t.equal(resolveConfig({}, { env: {} }).config.memory.heap_limit_mb, 0);
  t.equal(resolveConfig({ memory: { heap_limit_mb: 256 } }, { env: {} }).config.memory.heap_limit_mb, 256);
  for (const bad of [-1, 'lots', 1.5]) {
    const { problems } = resolveConfig({ memory: { heap_limit_mb: bad } }, { env: {} });
    t.ok(problems.some((p) => p.key === 'memory.heap_limit_mb' && p.level !== 'warn'), `${JSON.stringify(bad)}: ${JSON.stringify(problems)}`);
  }
});

t.test('NODE_OPTIONS is split as Node splits it', async (t) => {
  t.same(nodeOptionsArgs(undefined), []);
  t.same(nodeOptionsArgs('  --max-semi-space-size=8   --inspect '), ['--max-semi-space-size=8', '--inspect']);
  t.same(nodeOptionsArgs('"--max-semi-space-size=8" "--import=file:///a b/c.mjs"'), ['--max-semi-space-size=8', '--import=file:///a b/c.mjs']);
  t.same(nodeOptionsArgs('"--title=say \\"hi\\""'), ['--title=say "hi"']);
});
