// oclif.manifest.json lets a command run import only its own module. oclif trusts the
// manifest blindly, so these tests pin that the CLI rewrites a missing or stale one before
// oclif reads it, its own and its admin plugin's: a command compiled after the manifest
// was written must still be found.
import { mkdirSync, readdirSync, readFileSync, renameSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { MANIFEST_FILE, manifestIsFresh } from '../src/manifest.js';
import { FakeApi, NODE, headway, tempDir } from './helpers.js';

t.setTimeout(120_000);

const CLI_ROOT = fileURLToPath(new URL('../../', import.meta.url));
/** ADMIN_ROOT is the @headway/cli-admin plugin, a core plugin checked out beside the CLI. */
const ADMIN_ROOT = fileURLToPath(new URL('../../../cli-admin/', import.meta.url));
const MANIFEST = join(ADMIN_ROOT, MANIFEST_FILE);

/** compiledCommandIds lists the command ids oclif's pattern strategy derives from a package's dist/src/commands. */
function compiledCommandIds(root: string): string[] {
  const base = join(root, 'dist', 'src', 'commands');
  const ids: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(dir, e.name));
      else if (e.name.endsWith('.js')) ids.push(relative(base, join(dir, e.name)).replace(/\.js$/, '').split('/').join(':'));
    }
  };
  walk(base);
  return ids.sort();
}

t.test('manifestIsFresh compares the manifest with the compiled commands and package.json', async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  mkdirSync(join(dir, 'dist/src/commands/nodes'), { recursive: true });
  writeFileSync(join(dir, 'package.json'), '{}');
  writeFileSync(join(dir, 'dist/src/commands/nodes/list.js'), '');
  const past = new Date(Date.now() - 60_000);
  for (const p of ['package.json', 'dist/src/commands/nodes/list.js', 'dist/src/commands/nodes', 'dist/src/commands']) utimesSync(join(dir, p), past, past);
  t.notOk(manifestIsFresh(dir), 'no manifest is not fresh');
  writeFileSync(join(dir, MANIFEST_FILE), '{}');
  t.ok(manifestIsFresh(dir), 'written after every command');
  const later = new Date(Date.now() + 60_000);
  utimesSync(join(dir, 'dist/src/commands/nodes/list.js'), later, later);
  t.notOk(manifestIsFresh(dir), 'a command compiled after it makes it stale');
  utimesSync(join(dir, 'dist/src/commands/nodes/list.js'), past, past);
  t.ok(manifestIsFresh(dir));
  utimesSync(join(dir, 'dist/src/commands/nodes'), later, later);
  t.notOk(manifestIsFresh(dir), 'a command added to or removed from a topic makes it stale');
  utimesSync(join(dir, 'dist/src/commands/nodes'), past, past);
  utimesSync(join(dir, 'package.json'), later, later);
  t.notOk(manifestIsFresh(dir), 'a changed package.json makes it stale');
});

t.test('the CLI and its admin plugin each have a manifest of all their commands', async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const r = await headway(['version'], { env: { HOME: dir }, cwd: dir });
  t.equal(r.code, 0, r.stderr);
  for (const root of [CLI_ROOT, ADMIN_ROOT]) {
    const manifest = JSON.parse(readFileSync(join(root, MANIFEST_FILE), 'utf8')) as { commands: Record<string, { examples?: unknown[] }> };
    t.same(Object.keys(manifest.commands).sort(), compiledCommandIds(root), `${root}: every compiled command`);
  }
  t.ok(compiledCommandIds(CLI_ROOT).includes('serve') && !compiledCommandIds(CLI_ROOT).includes('nodes:list'), 'the core CLI keeps serve; admin topics are not in it');
  t.ok(compiledCommandIds(ADMIN_ROOT).includes('nodes:list'), 'nodes list lives in the admin plugin');
});

t.test('a stale manifest missing a command is rewritten before oclif reads it', async (t) => {
  const { dir, cleanup } = tempDir();
  const api = new FakeApi(dir).on('GET', '/api/v1/node', { body: { nodes: [NODE] } });
  await api.start();
  t.teardown(async () => {
    await api.close();
    cleanup();
  });
  // Make sure a current manifest exists, then replace it (atomically, already stale, so a
  // concurrent CLI run never takes it for current) with one that lacks `nodes list`.
  const warm = await headway(['version'], { env: { HOME: dir }, cwd: dir });
  t.equal(warm.code, 0, warm.stderr);
  const current = JSON.parse(readFileSync(MANIFEST, 'utf8')) as { commands: Record<string, unknown> };
  t.same(Object.keys(current.commands).sort(), compiledCommandIds(ADMIN_ROOT), 'the manifest lists every compiled command');
  const stale = { ...current, commands: { ...current.commands } };
  delete stale.commands['nodes:list'];
  const tmp = `${MANIFEST}.test-${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(stale));
  const past = new Date(statSync(join(ADMIN_ROOT, 'dist/src/commands/nodes/list.js')).mtimeMs - 60_000);
  utimesSync(tmp, past, past);
  renameSync(tmp, MANIFEST);

  const r = await headway(['nodes', 'list'], { env: { HOME: dir, HEADWAY_UNIX_SOCKET: api.socketPath }, cwd: dir });
  t.equal(r.code, 0, `nodes list is found (stderr: ${r.stderr.trim()})`);
  t.match(r.stdout, /laptop-1/);
  const rewritten = JSON.parse(readFileSync(MANIFEST, 'utf8')) as { commands: Record<string, unknown> };
  t.ok('nodes:list' in rewritten.commands, 'the manifest was rewritten with the command');
});
