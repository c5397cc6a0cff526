// The plugin mechanism end to end, as an operator uses it: `headway plugins install` of
// the example plugin packed as a tarball (into a scratch data directory, never the user's
// home), its command running with the CLI's own @headway/cli, `plugins uninstall`; and
// the oclif plugins the CLI bundles: `help` and shell completion.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { FakeApi, headway, tempDir } from './helpers.js';

t.setTimeout(600_000);

const ROOT = fileURLToPath(new URL('../../../../', import.meta.url));
const HELLO_ROOT = join(ROOT, 'examples/plugin-cli-hello');
const HELLO = '@headway-examples/plugin-cli-hello';

/** NPM is the npm CLI @oclif/plugin-plugins installs with (its pinned dependency), run by this Node. */
function npmCli(): string {
  const require = createRequire(join(ROOT, 'node_modules/@oclif/plugin-plugins/package.json'));
  const pkgPath = require.resolve('npm/package.json');
  const bin = (JSON.parse(readFileSync(pkgPath, 'utf8')) as { bin: Record<string, string> }).bin.npm!;
  return join(dirname(pkgPath), bin);
}

/** packJson reads `npm pack --json`, whose stdout also carries what the prepack script printed. */
function packJson(stdout: string): { filename: string; files: { path: string }[] }[] {
  return JSON.parse(stdout.slice(stdout.search(/^\[/m)));
}

t.test('the shipped CLI declares no example plugin', async (t) => {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'packages/cli/package.json'), 'utf8')) as { dependencies: Record<string, string>; oclif: { plugins: string[] } };
  t.notOk(HELLO in pkg.dependencies, 'not a dependency');
  t.notOk(pkg.oclif.plugins.includes(HELLO), 'not in oclif.plugins');
  t.ok(pkg.oclif.plugins.includes('@headway/cli-admin'), 'the admin commands come as a core plugin');
});

t.test('plugins install from a packed tarball makes its command runnable; uninstall removes it', { skip: existsSync(join(HELLO_ROOT, 'dist/src/commands/hello.js')) ? false : 'examples/plugin-cli-hello is not built' }, async (t) => {
  const { dir, cleanup } = tempDir();
  const api = new FakeApi(dir).on('GET', '/api/v1/health', { body: { databaseConnectivity: true } });
  await api.start();
  t.teardown(async () => {
    await api.close();
    cleanup();
  });
  // HOME and XDG_DATA_HOME keep npm's cache and oclif's plugin directory in the scratch
  // directory; offline npm proves the plugin needs nothing from a registry (its peers come
  // from the CLI). HEADWAY_DATA_DIR is the server's data_dir: it must not receive plugins.
  const env = {
    HOME: dir,
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CACHE_HOME: `${dir}/cache`,
    HEADWAY_DATA_DIR: `${dir}/server-data`,
    HEADWAY_UNIX_SOCKET: api.socketPath,
    npm_config_offline: 'true',
    npm_config_update_notifier: 'false',
    npm_config_audit: 'false',
    npm_config_fund: 'false',
  };
  const packed = packJson(execFileSync(process.execPath, [npmCli(), 'pack', '--json', '--pack-destination', dir], { cwd: HELLO_ROOT, env: { ...process.env, ...env }, encoding: 'utf8' }));
  const tarball = join(dir, packed[0]!.filename);
  t.ok(packed[0]!.files.some((f) => f.path === 'oclif.manifest.json'), 'the packed plugin carries its command manifest');

  let r = await headway(['plugins', 'install', `file:${tarball}`], { env, cwd: dir, timeout: 300_000 });
  t.equal(r.code, 0, `installed (stderr: ${r.stderr.trim()})`);
  const pluginsDir = `${dir}/data/headway/plugins`;
  t.ok(existsSync(`${pluginsDir}/node_modules/${HELLO}/package.json`), 'the plugin is in $XDG_DATA_HOME/headway/plugins');
  t.notOk(existsSync(`${pluginsDir}/node_modules/@headway/cli`), 'no second copy of @headway/cli: the plugin uses the running CLI\'s');
  t.notOk(existsSync(`${pluginsDir}/node_modules/@oclif/core`), 'nor of @oclif/core');
  // oclif would take HEADWAY_DATA_DIR, the server's data_dir, as its plugin directory.
  t.notOk(existsSync(`${dir}/server-data`), 'the server\'s data_dir received nothing');

  r = await headway(['plugins'], { env, cwd: dir });
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, new RegExp(`${HELLO} 0\\.1\\.0`), 'plugins lists it');
  r = await headway(['--help'], { env, cwd: dir });
  t.match(r.stdout, /^\s+hello\s+Say hello/m, 'its command is in the help');
  r = await headway(['hello', '--name', 'Ada'], { env, cwd: dir });
  t.equal(r.code, 0, r.stderr);
  t.equal(r.stdout, 'Hello, Ada!\nserver: healthy\n', 'it runs and reaches the server through the CLI\'s client');
  t.equal(api.last.path, '/api/v1/health');
  r = await headway(['hello', '--bogus'], { env, cwd: dir });
  t.equal(r.code, 2, 'bad input gets the CLI\'s usage-error handling (exit 2)');
  t.equal(r.stderr, 'Error: unknown flag: --bogus. See `headway hello --help`.\n');

  r = await headway(['plugins', 'uninstall', HELLO], { env, cwd: dir, timeout: 300_000 });
  t.equal(r.code, 0, `uninstalled (stderr: ${r.stderr.trim()})`);
  t.notOk(existsSync(`${pluginsDir}/node_modules/${HELLO}`), 'its files are gone');
  r = await headway(['hello'], { env, cwd: dir });
  t.equal(r.code, 2);
  t.match(r.stderr, /unknown command "hello"/, 'its command is gone');
  r = await headway(['plugins'], { env, cwd: dir });
  t.match(r.stdout, /No plugins installed/);
});

t.test('help command: the list of topics, and a command\'s usage with its examples', async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const env = { HOME: dir, XDG_DATA_HOME: `${dir}/data` };
  let r = await headway(['help'], { env, cwd: dir });
  t.equal(r.code, 0, r.stderr);
  for (const topic of ['nodes', 'users', 'preauthkeys', 'apikeys', 'policy', 'config', 'plugins']) t.match(r.stdout, new RegExp(`^\\s+${topic}\\s`, 'm'), `lists ${topic}`);
  for (const command of ['serve', 'version', 'health', 'help', 'autocomplete']) t.match(r.stdout, new RegExp(`^\\s+${command}\\s`, 'm'), `lists ${command}`);
  r = await headway(['help', 'nodes', 'list'], { env, cwd: dir });
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, /USAGE\n\s+\$ headway nodes list/);
  t.match(r.stdout, /EXAMPLES\n\s+\$ headway nodes list\n/);
  r = await headway(['help', 'serve'], { env, cwd: dir });
  t.match(r.stdout, /-c, --config/);
  t.notMatch(r.stdout, /--output|--force/, 'serve lists only the flags that concern it');
});

t.test('shell completion covers the admin plugin\'s commands and each command\'s own flags', async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const env = { HOME: dir, XDG_DATA_HOME: `${dir}/data`, XDG_CACHE_HOME: `${dir}/cache` };
  let r = await headway(['autocomplete', 'bash'], { env, cwd: dir, timeout: 60_000 });
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, /headway autocomplete script bash/, 'setup instructions');
  r = await headway(['autocomplete', '--refresh-cache'], { env, cwd: dir, timeout: 60_000 });
  t.equal(r.code, 0, r.stderr);
  const script = `${dir}/cache/headway/autocomplete/functions/bash/headway.bash`;
  t.ok(existsSync(script), 'the bash completion function is in $XDG_CACHE_HOME/headway');
  // Ask bash's completion function what <TAB> offers, as an interactive shell would.
  const complete = (...words: string[]) =>
    execFileSync('bash', ['-c', `source "$0"; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _headway_autocomplete; printf '%s\\n' "\${COMPREPLY[@]}"`, script, 'headway', ...words], { encoding: 'utf8' })
      .split('\n')
      .filter(Boolean);
  t.same(complete('nodes', 'li'), ['list', 'list-routes'], 'headway nodes li<TAB>');
  t.same(complete('nodes', 'list', '--u'), ['--user'], 'headway nodes list --u<TAB>');
  t.same(complete('serve', '--'), ['--config'], 'headway serve --<TAB>: only -c concerns serve');
  t.ok(complete('pre').includes('preauthkeys'), 'headway pre<TAB>');
});
