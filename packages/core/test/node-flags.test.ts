import t from 'tap';
import { resolveConfig } from '../src/config/load.js';
import { nodeOptionsArgs, SERVER_HEAP_LIMIT_MB, SERVER_SEMI_SPACE_MB, serverNodeFlags } from '../src/node-flags.js';

const memory = (heap_limit_mb: number) => ({ memory: { heap_limit_mb } });

const semi = `--max-semi-space-size=${SERVER_SEMI_SPACE_MB}`;

t.test('the server gets its semi-space and an old generation of memory.heap_limit_mb, or at most SERVER_HEAP_LIMIT_MB', async (t) => {
  t.same(serverNodeFlags(memory(0), [], 4096), [semi, `--max-old-space-size=${SERVER_HEAP_LIMIT_MB}`], 'a large host: the limit is brought down');
  t.same(serverNodeFlags(memory(0), [], SERVER_HEAP_LIMIT_MB / 2), [semi], 'a small host or container: Node\'s own, smaller limit stays');
  t.same(serverNodeFlags(memory(512), [], 4096), [semi, '--max-old-space-size=512']);
  t.same(serverNodeFlags(memory(3000), [], 256), [semi, '--max-old-space-size=3000'], 'the configured limit wins either way');
});

t.test('an option the operator gave is left alone, however it is spelled', async (t) => {
  t.same(serverNodeFlags(memory(512), ['--max-semi-space-size=16'], 4096), ['--max-old-space-size=512']);
  t.same(serverNodeFlags(memory(0), ['--max_old_space_size=2048', '--inspect'], 4096), [semi]);
  t.same(serverNodeFlags(memory(512), ['--max-semi-space-size=4', '--max-old-space-size=99'], 4096), [], 'nothing to add');
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
