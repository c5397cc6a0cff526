// @headway/core/ports loads no server code: a fresh node process imports the entry point
// under a module-load recorder, and the list of what it loaded must hold none of the
// server's dependencies or modules. The barrel is recorded the same way as a control, so
// the test fails if the recorder stopped seeing modules rather than passing vacuously.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';

const RECORDER = fileURLToPath(new URL('../../../core/test/fixtures/load-recorder/index.mjs', import.meta.url));
const SERVER_ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** SERVER_ONLY names, by a pattern over the loaded module's URL or path, what the ports entry must not load. */
const SERVER_ONLY: [string, RegExp][] = [
  ['koa', /\/node_modules\/koa\//],
  ['@koa/router', /\/node_modules\/@koa\//],
  ['@headway/derp', /\/packages\/derp\/|\/@headway\/derp\//],
  ['@headway/noise', /\/packages\/noise\/|\/@headway\/noise\//],
  // The ports entry takes its IP library from @headway/policy/ip; nothing else of the policy package.
  ['@headway/policy', /\/(?:packages|@headway)\/policy\/(?!dist\/src\/ip[./])/],
  ['prom-client', /\/node_modules\/prom-client\//],
  ['zod', /\/node_modules\/zod\//],
  ['awilix', /\/node_modules\/awilix\//],
  ['@headway/control', /\/packages\/control\/dist\//],
  ['@headway/server', /\/packages\/server\/dist\//],
  ['@headway/api', /\/packages\/api\/dist\//],
  ['core state/', /\/packages\/core\/dist\/src\/state\//],
  ['core policy/', /\/packages\/core\/dist\/src\/policy\//],
  ['core kernel/', /\/packages\/core\/dist\/src\/kernel\//],
];

/** loadedBy runs `import(specifier)` in a fresh node process and returns every module it loaded. */
async function loadedBy(specifier: string): Promise<{ modules: string[]; exports: string[] }> {
  const dir = mkdtempSync(join(tmpdir(), 'headway-ports-entry-'));
  const record = join(dir, 'loaded.txt');
  try {
    const script = `const m = await import(${JSON.stringify(specifier)}); console.log(JSON.stringify(Object.keys(m)));`;
    const stdout = await new Promise<string>((resolve, reject) => {
      execFile(process.execPath, ['--import', RECORDER, '--input-type=module', '-e', script], {
        cwd: SERVER_ROOT,
        env: { PATH: process.env.PATH ?? '', HEADWAY_LOAD_RECORD: record },
      }, (err, out, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(String(out))));
    });
    const modules = readFileSync(record, 'utf8').split('\n').filter((l) => l !== '' && !l.includes('/load-recorder/'));
    return { modules, exports: JSON.parse(stdout) as string[] };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const serverModulesIn = (modules: string[]) =>
  SERVER_ONLY.flatMap(([name, re]) => modules.filter((m) => re.test(m)).map((m) => `${name}: ${m}`));

t.test('importing @headway/core/ports loads none of the server', async (t) => {
  const { modules, exports } = await loadedBy('@headway/core/ports');
  t.ok(modules.some((m) => m.endsWith('/packages/core/dist/src/ports/index.js')), 'the recorder saw the entry point itself');
  t.same(serverModulesIn(modules), [], 'no server module or dependency was loaded');
  console.log(`# @headway/core/ports loads ${modules.length} modules`);
  // What adapters, plugins and the CLI reach through it.
  for (const name of [
    'STORAGE', 'POLICY', 'DNS', 'assertStoragePort', 'assertPolicySourcePort', 'assertDnsPort', 'assertPort', 'PortAssertionError',
    'StorageConflictError', 'StorageRetryableError', 'StorageVersionError', 'HeadwayError', 'ERRORS',
    'loadConfig', 'resolveConfig', 'defaultConfig', 'formatProblem', 'configSearchPath', 'KEYS', 'parseDuration', 'formatDuration',
    'createLogger', 'silentLogger', 'parsePrefix', 'ownedByTags',
  ]) t.ok(exports.includes(name), `exports ${name}`);
  t.notOk(exports.includes('startServer'), 'does not export startServer');
});

t.test('the recorder catches the server when its barrel is imported (control)', async (t) => {
  const { modules, exports } = await loadedBy('@headway/server');
  t.ok(exports.includes('startServer'));
  const found = new Set(serverModulesIn(modules).map((l) => l.slice(0, l.indexOf(':'))));
  for (const name of ['koa', '@headway/derp', '@headway/noise', 'prom-client', '@headway/control', '@headway/server', '@headway/api', 'core state/']) {
    t.ok(found.has(name), `the server loads ${name}`);
  }
  console.log(`# @headway/server loads ${modules.length} modules`);
});

// What a server uses only in some configurations is imported when it is used: each is MiBs of every server's heap.
t.test('the server does not load Let\'s Encrypt\'s client or the X.509 generator until they are used', async (t) => {
  const { modules } = await loadedBy('@headway/server');
  for (const pkg of ['acme-client', 'node-forge', 'axios', 'selfsigned', '@peculiar/x509']) {
    t.same(modules.filter((m) => m.includes(`/node_modules/${pkg}/`)), [], `importing @headway/server loads nothing of ${pkg}`);
  }
});

// grpc-js and the proto loader take about half a second to load: only the gRPC listener needs them.
t.test('the server does not load grpc-js (startServer imports it when grpc_listen_addr is set); @headway/api/grpc does', async (t) => {
  const grpcModules = (modules: string[]) => modules.filter((m) => /\/node_modules\/@grpc\//.test(m));
  t.same(grpcModules((await loadedBy('@headway/server')).modules), [], 'importing @headway/server loads no @grpc module');
  const entry = await loadedBy('@headway/api/grpc');
  t.ok(grpcModules(entry.modules).some((m) => m.includes('/@grpc/grpc-js/')), 'the control: @headway/api/grpc loads grpc-js');
  for (const name of ['startGrpcServer', 'headscaleServiceDefinition', 'HANDLERS']) t.ok(entry.exports.includes(name), `exports ${name}`);
  // What the server imports to listen: grpc-js and the service wait for a first gRPC client.
  const listener = await loadedBy('@headway/api/grpc-listener');
  t.same(grpcModules(listener.modules), [], 'importing @headway/api/grpc-listener loads no @grpc module');
  for (const name of ['startGrpcServer', 'bindGrpcPort']) t.ok(listener.exports.includes(name), `the listener entry exports ${name}`);
});
