import t from 'tap';
import { execFile, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { repoRoot } from '../src/tailscale.js';
import { exitCodeOf } from '../src/cli.js';

/*
 * The install path a self-hoster takes: scripts/install.sh, the README's first command, run here as it is
 * there. It packs every published workspace (running its prepack, as `npm publish` would), serves the
 * tarballs from a throwaway registry on 127.0.0.1 for the @headway scope only (scripts/packed-registry.mjs),
 * and has npm install @headway/cli by name into an empty prefix, with HOME an empty directory: no
 * ~/.npmrc, no node-gyp headers cached in ~/.cache/node-gyp, so the native addons must compile against the
 * headers of the Node that runs npm. Third-party dependencies come from the default registry through npm's
 * cache (--prefer-offline; `npm ci` filled it). Outside CI a machine without the registry skips with the
 * reason; under CI=true it fails.
 */

const root = repoRoot();
const CI = process.env.CI === 'true';
/** PUBLISHED is the decision of what goes to the registry; the metadata test pins it. */
const PUBLISHED = [
  'aead', 'api', 'cli', 'cli-admin', 'console', 'control', 'core', 'derp', 'dns-rfc2136', 'drive-db', 'identity-oidc', 'memtrim', 'noise', 'policy', 'policy-db', 'policy-file',
  'server', 'storage-contract', 'storage-mysql', 'storage-postgres', 'storage-sql', 'storage-sqlite',
].map((p) => `@headway/${p}`).sort();

/** scripts/install.sh packs and serves the published workspaces with scripts/packed-registry.mjs; its list is the one pinned here. */
const { publishedWorkspaces } = await import(pathToFileURL(join(root, 'scripts', 'packed-registry.mjs')).href) as
  typeof import('../../../scripts/packed-registry.mjs');

interface Workspace { dir: string; pkg: Record<string, any> }

function workspaces(): Workspace[] {
  const rootPkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { workspaces: string[] };
  return rootPkg.workspaces.map((dir) => ({ dir: join(root, dir), pkg: JSON.parse(readFileSync(join(root, dir, 'package.json'), 'utf8')) }));
}

/** env runs npm and the installed CLI on this Node (24), with the caller's npm config and cache. */
function env(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const clean: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('HEADWAY_') && !k.startsWith('TAP')) clean[k] = v;
  return { ...clean, PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ''}`, ...extra };
}

interface Run { code: number; stdout: string; stderr: string }

function run(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(cmd, args, { cwd: opts.cwd ?? root, env: opts.env ?? env(), timeout: opts.timeoutMs ?? 300_000, maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      const code = exitCodeOf(err);
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

/** OFFLINE matches npm failures that mean "no registry", not "broken package". */
const OFFLINE = /ENOTCACHED|ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|network request|request to .* failed/;

t.test('published packages: metadata an npm install needs', async (t) => {
  const all = workspaces();
  const published = publishedWorkspaces(root);
  t.same(published.map((w) => w.pkg.name).sort(), PUBLISHED, 'exactly these workspaces are published (and packed by scripts/install.sh)');
  const names = new Set(published.map((w) => w.pkg.name as string));
  for (const { dir, pkg } of all) {
    t.equal(pkg.engines?.node, '>=24', `${pkg.name}: engines.node`);
    const types = pkg.devDependencies?.['@types/node'];
    t.match(types, /^\^24\./, `${pkg.name}: @types/node ^24`);
  }
  for (const { dir, pkg } of published) {
    const n = pkg.name as string;
    t.match(n, /^@headway\//, `${n}: in the @headway scope`);
    t.same(pkg.publishConfig, { access: 'public' }, `${n}: a scoped package is public only when asked`);
    t.ok(pkg.license, `${n}: license`);
    t.ok(pkg.description, `${n}: description`);
    t.ok(Array.isArray(pkg.files) && pkg.files.includes('dist/src'), `${n}: files lists dist/src`);
    t.match(pkg.scripts?.prepack, /tsc -b/, `${n}: prepack builds dist`);
    // An oclif plugin (cli-admin) is loaded through its package.json and manifest, not imported.
    t.ok(pkg.exports?.['.'] || pkg.oclif?.commands, `${n}: exports (or oclif commands)`);
    t.ok(existsSync(join(dir, 'README.md')), `${n}: README.md`);
    for (const dep of Object.keys({ ...pkg.dependencies, ...pkg.peerDependencies })) {
      if (dep.startsWith('@headway/')) t.ok(names.has(dep), `${n}: depends on ${dep}, which is published`);
    }
  }
  const cli = published.find((w) => w.pkg.name === '@headway/cli')!.pkg;
  t.same(cli.bin, { headway: './bin/run.js' }, 'the headway bin');
  t.ok(cli.files.includes('oclif.manifest.json'), 'the command manifest ships (no import of every command per run)');
  t.ok(cli.files.includes('contrib'), 'the systemd unit ships with the CLI');
});

t.test('scripts/install.sh: npm install -g @headway/cli from the packed tarballs, then headway serve', async (t) => {
  const ping = await run('npm', ['ping'], { timeoutMs: 30_000 });
  if (ping.code !== 0) {
    const reason = `the npm registry is unreachable (npm ping: ${(ping.stderr.split('\n').find((l) => /ERR|error/.test(l)) ?? `exit ${ping.code}`).trim()})`;
    if (!CI) {
      t.comment(`skipped: ${reason}; third-party dependencies could not be installed`);
      t.skip(reason, () => undefined);
      return;
    }
    t.comment(`${reason}; CI=true, so trying npm's cache alone`);
  }

  const work = mkdtempSync(join(tmpdir(), 'hw-packed-'));
  t.teardown(() => rmSync(work, { recursive: true, force: true }));

  // 1-3. The README's command into an empty prefix, with an empty HOME and the caller's npm cache.
  const prefix = join(work, 'prefix');
  const installHome = join(work, 'install-home');
  mkdirSync(installHome);
  const cache = (await run('npm', ['config', 'get', 'cache'])).stdout.trim();
  const installStarted = Date.now();
  const install = await run('bash', [join(root, 'scripts', 'install.sh'), '--prefix', prefix],
    { env: env({ HOME: installHome, npm_config_cache: cache }), timeoutMs: 1_500_000 });
  if (install.code !== 0 && OFFLINE.test(install.stderr) && !CI) {
    t.comment(`skipped: installing third-party dependencies needs the registry or a filled npm cache:\n${install.stderr.slice(-2000)}`);
    t.skip('offline outside CI', () => undefined);
    return;
  }
  t.equal(install.code, 0, 'scripts/install.sh --prefix <empty dir>');
  if (install.code !== 0) { t.comment(`${install.stdout.slice(-2000)}\n${install.stderr.slice(-4000)}`); return; }
  t.comment(`scripts/install.sh: ${Date.now() - installStarted} ms`);
  t.comment(install.stdout.trim());
  // npm took each @headway package's integrity from the local packuments, so its bytes are the
  // packed tarball's (fetched, or found in npm's content-addressed cache under that integrity).
  const resolved = /^@headway packages from the packed tarballs: (.*)$/m.exec(install.stdout)?.[1]?.split(', ') ?? [];
  t.ok(resolved.includes('@headway/cli') && resolved.includes('@headway/core'), `@headway packages resolved from the packed tarballs: ${resolved.join(', ')}`);
  t.notOk(resolved.includes('@headway/storage-contract'), 'the test-only storage contract is not installed on a server');
  t.match(install.stdout, new RegExp(`^headway: ${prefix}/bin/headway -> `, 'm'), 'the script says where headway is');
  t.match(install.stdout, /^headway 0\.1\.0$/m, 'and ends with `headway version`');
  t.match(install.stdout, /^@headway\/memtrim: compiled, in use$/m, 'and says the memtrim addon is in use');
  t.match(install.stdout, /^@headway\/aead: compiled, in use$/m, 'and the aead addon');
  // The systemd unit runs <prefix>/bin/headway with the node beside it: Node 24, with its headers for the addons.
  const prefixNode = await run(join(prefix, 'bin', 'node'), ['-v']);
  t.match(prefixNode.stdout, /^v24\./, `Node 24 was installed as <prefix>/bin/node (${prefixNode.stdout.trim()})`);
  t.ok(existsSync(join(prefix, 'include', 'node', 'node.h')), 'with its headers in <prefix>/include/node');
  t.ok(existsSync(join(prefix, 'bin', 'npm')), 'and npm beside it, whose own node-gyp built the addons');

  const bin = join(prefix, 'bin', 'headway');
  t.ok(existsSync(bin), `${bin} exists`);
  const installed = join(prefix, 'lib', 'node_modules', '@headway', 'cli');
  for (const f of ['headway.service', 'headway.sysusers', 'headway.tmpfiles', 'config.yaml']) {
    t.ok(existsSync(join(installed, 'contrib', 'systemd', f)), `the install has contrib/systemd/${f}`);
  }
  const sqlite = [join(installed, 'node_modules', 'better-sqlite3'), join(prefix, 'lib', 'node_modules', 'better-sqlite3')].find((p) => existsSync(p));
  t.ok(sqlite, 'better-sqlite3 is installed with the CLI');
  if (sqlite) {
    t.notOk(existsSync(join(sqlite, 'build')), 'nothing was compiled at install time (no build/ directory)');
    t.comment(`better-sqlite3 prebuilds: ${readdirSync(join(sqlite, 'prebuilds')).join(', ')}`);
  }

  // @headway/memtrim is optional: npm compiles it at install where a C compiler is (as here), else goes on.
  // Compiled here with no headers in ~/.cache/node-gyp and no nodejs.org: against <prefix>/include/node.
  const memtrim = [join(installed, 'node_modules', '@headway', 'memtrim'), join(prefix, 'lib', 'node_modules', '@headway', 'memtrim'),
    join(installed, 'node_modules', '@headway', 'core', 'node_modules', '@headway', 'memtrim')].find((p) => existsSync(p));
  t.ok(memtrim && existsSync(join(memtrim, 'build', 'Release', 'memtrim.node')), 'npm compiled the optional @headway/memtrim at install');
  t.notOk(memtrim && existsSync(join(memtrim, 'build', 'not-built.txt')), 'and left no reason for a failure');
  // So is @headway/aead (OpenSSL's ChaCha20-Poly1305 for Noise records; without it they are sealed in WASM).
  const aead = [join(installed, 'node_modules', '@headway', 'aead'), join(prefix, 'lib', 'node_modules', '@headway', 'aead'),
    join(installed, 'node_modules', '@headway', 'noise', 'node_modules', '@headway', 'aead')].find((p) => existsSync(p));
  t.ok(aead && existsSync(join(aead, 'build', 'Release', 'aead.node')), 'npm compiled the optional @headway/aead at install');
  t.notOk(aead && existsSync(join(aead, 'build', 'not-built.txt')), 'and left no reason for a failure');

  // 4. Start the installed server on ephemeral loopback ports with a temporary config.
  const home = join(work, 'home');
  mkdirSync(home);
  const config = join(work, 'config.yaml');
  writeFileSync(config, [
    'server_url: https://headway.example.com',
    'listen_addr: 127.0.0.1:0',
    'metrics_listen_addr: 127.0.0.1:0',
    // The gRPC API loads its .proto files from the installed package.
    'grpc_listen_addr: 127.0.0.1:0',
    `data_dir: ${join(work, 'data')}`,
    'log:',
    '  format: json',
    'derp:',
    '  server:',
    '    stun_listen_addr: 127.0.0.1:0',
    '',
  ].join('\n'));
  const cliEnv = env({ HOME: home });
  const version = await run(bin, ['version'], { cwd: home, env: cliEnv, timeoutMs: 60_000 });
  t.equal(version.code, 0, `headway version: ${version.stdout.trim()} ${version.stderr.trim()}`);

  const started = Date.now();
  const server = spawn(bin, ['serve', '--config', config], { cwd: home, env: cliEnv, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  let grpcUrl: string | undefined;
  const exited = new Promise<number | null>((resolve) => server.once('exit', (code) => resolve(code)));
  t.teardown(() => { if (server.exitCode === null) server.kill('SIGKILL'); });
  const http = await new Promise<string | undefined>((resolve) => {
    const timer = setTimeout(() => resolve(undefined), 60_000);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      for (const line of output.split('\n')) {
        if (!line.startsWith('{')) continue;
        try {
          const entry = JSON.parse(line) as { msg?: string; http?: string; grpc?: string };
          if (entry.msg === 'listening' && entry.http) { grpcUrl = entry.grpc; clearTimeout(timer); resolve(entry.http); }
        } catch { /* a partial line */ }
      }
    };
    server.stdout.on('data', onData);
    server.stderr.on('data', onData);
    void exited.then(() => { clearTimeout(timer); resolve(undefined); });
  });
  t.ok(http, 'the installed server logs where it listens');
  if (!http) { t.comment(output.slice(-4000)); return; }
  t.comment(`headway serve from the install: listening after ${Date.now() - started} ms`);
  t.match(grpcUrl, /^grpc:\/\/127\.0\.0\.1:\d+$/, 'the gRPC API found its .proto files in the installed package');

  const health = await fetch(`${http}/health`);
  t.equal(health.status, 200, 'GET /health');

  const create = await run(bin, ['users', 'create', 'alice', '--config', config], { cwd: home, env: cliEnv, timeoutMs: 60_000 });
  t.equal(create.code, 0, `headway users create: ${create.stderr}`);
  const list = await run(bin, ['users', 'list', '--config', config, '-o', 'json'], { cwd: home, env: cliEnv, timeoutMs: 60_000 });
  t.equal(list.code, 0, `headway users list: ${list.stderr}`);
  t.match(JSON.parse(list.stdout), [{ name: 'alice' }], 'the user created through the installed CLI is listed');

  server.kill('SIGTERM');
  t.equal(await exited, 0, 'SIGTERM stops the server cleanly');
  t.notMatch(output, /"level":"(error|fatal)"/, 'no error was logged');
});

t.test('an addon build that fails at install leaves its reason where the loader reports it', async (t) => {
  // The packages as their tarballs hold them (package.json `files`, the install script prepack copies in),
  // installed by npm's own lifecycle (`npm run install`) on a machine whose C compiler is missing.
  for (const [name, load] of [['memtrim', 'loadMemoryTrim'], ['aead', 'loadAead']] as const) {
    const src = join(root, 'packages', name);
    const pkg = JSON.parse(readFileSync(join(src, 'package.json'), 'utf8')) as { files: string[] };
    const dir = mkdtempSync(join(tmpdir(), `hw-not-built-${name}-`));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    for (const f of pkg.files) if (f !== 'addon-install.mjs') cpSync(join(src, f), join(dir, f), { recursive: true });
    cpSync(join(src, 'package.json'), join(dir, 'package.json'));
    cpSync(join(root, 'scripts', 'addon-install.mjs'), join(dir, 'addon-install.mjs'));
    const home = mkdtempSync(join(tmpdir(), 'hw-home-'));
    t.teardown(() => rmSync(home, { recursive: true, force: true }));

    const install = await run('npm', ['run', 'install'], { cwd: dir, env: env({ HOME: home, CC: '/nonexistent/cc', CXX: '/nonexistent/c++' }), timeoutMs: 300_000 });
    t.equal(install.code, 0, `${name}: a failed build does not fail the install`);
    t.match(install.stderr, new RegExp(`@headway/${name}: the addon was not built \\(.*nonexistent/c.*\\); the server runs without it`), `${name}: and says so`);
    t.notOk(existsSync(join(dir, 'build', 'Release', `${name}.node`)), `${name}: nothing was built`);
    const notBuilt = readFileSync(join(dir, 'build', 'not-built.txt'), 'utf8');
    t.match(notBuilt.split('\n')[0], /nonexistent\/c/, `${name}: build/not-built.txt starts with the cause: ${notBuilt.split('\n')[0]}`);
    t.match(notBuilt, /gyp ERR!/, `${name}: followed by node-gyp's output`);

    const mod = await import(pathToFileURL(join(dir, 'dist', 'src', 'index.js')).href) as Record<typeof load, () => { unavailable?: string; buildFailed?: boolean }>;
    const loaded = mod[load]();
    t.match(loaded.unavailable, new RegExp(`^the ${name} addon failed to build at install: .*nonexistent/c.*not-built\\.txt has node-gyp's output`),
      `${name}: the loader's reason, which the server logs at start, carries it: ${loaded.unavailable}`);
    t.equal(loaded.buildFailed, true, `${name}: as a failed build (the server warns)`);
  }

  // A build that succeeds but does not load (a distribution's node-gyp linking its own libnode crashes Node 24).
  const dir = mkdtempSync(join(tmpdir(), 'hw-not-loading-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const gyp = join(dir, 'fake-node-gyp.mjs');
  writeFileSync(gyp, "import { mkdirSync, writeFileSync } from 'node:fs';\n"
    + "mkdirSync('build/Release', { recursive: true }); writeFileSync('build/Release/memtrim.node', 'not a shared object');\n");
  const pkgDir = join(dir, 'memtrim');
  mkdirSync(pkgDir);
  cpSync(join(root, 'packages', 'memtrim', 'package.json'), join(pkgDir, 'package.json'));
  const check = await run(process.execPath, [join(root, 'scripts', 'addon-install.mjs')], { cwd: pkgDir, env: env({ npm_config_node_gyp: gyp }) });
  t.equal(check.code, 0, 'an addon that does not load does not fail the install');
  t.notOk(existsSync(join(pkgDir, 'build', 'Release', 'memtrim.node')), 'it is removed, so the loader does not try it');
  t.match(readFileSync(join(pkgDir, 'build', 'not-built.txt'), 'utf8').split('\n')[0],
    /^the built memtrim\.node fails when node v24\.\S+ \(.*\) loads it: Error: .*memtrim\.node: (invalid ELF header|file too short)/, 'and not-built.txt says why');
});
