// The CLI and the adapters never load the server: their compiled sources hold no static
// import of the `@headway/core` barrel (only `@headway/core/ports`), and a run of
// `headway nodes list` / `headway --help` under a module-load recorder loads none of the
// server's modules. `headway serve` is the one command that imports the server, lazily.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { FakeApi, NODE, headway, tempDir } from './helpers.js';

t.setTimeout(120_000);

const ROOT = fileURLToPath(new URL('../../../../', import.meta.url));
const RECORDER = join(ROOT, 'packages/core/test/fixtures/load-recorder/index.mjs');

/** BARREL_STATIC matches a static import, re-export or require of the barrel (not of a subpath). */
const BARREL_STATIC = /(?:\bfrom\s*|\bimport\s*|\brequire\(\s*)(['"])@headway\/(?:core|server|control|api)\1/;
const BARREL_DYNAMIC = /\bimport\(\s*(['"])@headway\/(?:core|server|control|api)\1\s*\)/;

/** packagesToCheck lists the CLI and its plugins, every storage and policy adapter and every example, by directory. */
function packagesToCheck(): string[] {
  const dirs: string[] = [];
  for (const name of readdirSync(join(ROOT, 'packages'))) {
    if (name === 'cli' || name.startsWith('cli-') || name.startsWith('storage-') || name.startsWith('policy-') || name.startsWith('drive-')) dirs.push(join('packages', name));
  }
  for (const name of readdirSync(join(ROOT, 'examples'))) {
    if (statSync(join(ROOT, 'examples', name)).isDirectory()) dirs.push(join('examples', name));
  }
  return dirs;
}

function compiledFiles(dir: string, out: string[] = []): string[] {
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) compiledFiles(p, out);
    else if (e.endsWith('.js') || e.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

t.test('the barrel pattern matches static imports only', async (t) => {
  t.match(`import { loadConfig } from '@headway/core';`, BARREL_STATIC);
  t.match(`export * from "@headway/core";`, BARREL_STATIC);
  t.match(`import '@headway/core';`, BARREL_STATIC);
  t.match(`const c = require('@headway/core');`, BARREL_STATIC);
  t.notMatch(`import { loadConfig } from '@headway/core/ports';`, BARREL_STATIC);
  t.notMatch(`const core = await import('@headway/core');`, BARREL_STATIC);
  t.match(`const core = await import('@headway/core');`, BARREL_DYNAMIC);
  t.match(`import { startServer } from '@headway/server';`, BARREL_STATIC);
});

t.test('no compiled CLI or adapter source imports a server barrel (@headway/core, server, control, api) statically', async (t) => {
  const packages = packagesToCheck();
  t.ok(packages.includes('packages/cli') && packages.includes('packages/cli-admin') && packages.includes('packages/storage-sql') && packages.includes('packages/policy-db'), packages.join(', '));
  const offenders: string[] = [];
  const dynamic: string[] = [];
  for (const pkg of packages) {
    const src = join(ROOT, pkg, 'dist', 'src');
    t.ok(existsSync(src), `${pkg} is built`);
    if (!existsSync(src)) continue;
    const files = compiledFiles(src);
    t.ok(files.length > 0, `${pkg} has compiled sources`);
    for (const file of files) {
      const text = readFileSync(file, 'utf8');
      const rel = relative(ROOT, file);
      text.split('\n').forEach((line, i) => {
        if (BARREL_STATIC.test(line)) offenders.push(`${rel}:${i + 1}: ${line.trim()}`);
        if (BARREL_DYNAMIC.test(line)) dynamic.push(rel);
      });
    }
  }
  t.same(offenders, [], 'import @headway/core/ports instead (a barrel loads the server)');
  t.same([...new Set(dynamic)], ['packages/cli/dist/src/serve-main.js'], 'only the server process of `headway serve` (serve-main.js) imports the server, at run time');
});

/** SERVER_ONLY names what an admin command must not load, by a pattern over the module's URL or path. */
const SERVER_ONLY: [string, RegExp][] = [
  ['koa', /\/node_modules\/koa\//],
  ['@koa/router', /\/node_modules\/@koa\//],
  ['@headway/derp', /\/packages\/derp\/|\/@headway\/derp\//],
  ['@headway/noise', /\/packages\/noise\/|\/@headway\/noise\//],
  ['prom-client', /\/node_modules\/prom-client\//],
  ['knex', /\/node_modules\/knex\//],
  ['@headway/control', /\/packages\/control\/dist\//],
  ['@headway/server', /\/packages\/server\/dist\//],
  ['@headway/api', /\/packages\/api\/dist\//],
  ['core state/', /\/packages\/core\/dist\/src\/state\//],
  ['core index.js (the barrel)', /\/packages\/core\/dist\/src\/index\.js$/],
];

t.test('headway nodes list and --help load no server code', async (t) => {
  const { dir, cleanup } = tempDir();
  const api = new FakeApi(dir).on('GET', '/api/v1/node', { body: { nodes: [NODE] } });
  await api.start();
  const scratch = mkdtempSync(join(tmpdir(), 'headway-cli-loads-'));
  t.teardown(async () => {
    await api.close();
    cleanup();
    rmSync(scratch, { recursive: true, force: true });
  });
  for (const args of [['nodes', 'list'], ['--help']]) {
    const record = join(scratch, `${args.join('-')}.txt`);
    const r = await headway(args, {
      env: { HOME: dir, HEADWAY_UNIX_SOCKET: api.socketPath, HEADWAY_LOAD_RECORD: record, NODE_OPTIONS: `--import=${RECORDER}` },
      cwd: dir,
    });
    t.equal(r.code, 0, `headway ${args.join(' ')} exits 0 (stderr: ${r.stderr.trim()})`);
    if (args[0] === 'nodes') t.match(r.stdout, /laptop-1/, 'the node is listed');
    const loaded = readFileSync(record, 'utf8').split('\n').filter((l) => l !== '' && !l.includes('/load-recorder/'));
    t.ok(loaded.some((m) => m.includes('/@oclif/core/')), 'the recorder saw the CLI load');
    const server = SERVER_ONLY.flatMap(([name, re]) => loaded.filter((m) => re.test(m)).map((m) => `${name}: ${m}`));
    t.same(server, [], `headway ${args.join(' ')} loads no server module`);
    console.log(`# headway ${args.join(' ')} loads ${loaded.length} modules`);
  }
});
