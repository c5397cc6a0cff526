// `npm pack` of the CLI: the tarball carries the command manifest and the commit it was
// packed from, so an installed `headway version` (no git checkout) still names it, and the
// source tree is left without the record (it keeps asking git).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { BUILD_INFO_FILE, buildInfo, gitDescribe } from '../src/build-info.js';
import { tempDir } from './helpers.js';

t.setTimeout(300_000);

const ROOT = fileURLToPath(new URL('../../../../', import.meta.url));
const CLI_ROOT = fileURLToPath(new URL('../../', import.meta.url));

function npmCli(): string {
  const require = createRequire(join(ROOT, 'node_modules/@oclif/plugin-plugins/package.json'));
  const pkgPath = require.resolve('npm/package.json');
  return join(dirname(pkgPath), (JSON.parse(readFileSync(pkgPath, 'utf8')) as { bin: Record<string, string> }).bin.npm!);
}

/** packJson reads `npm pack --json`, whose stdout also carries what the prepack script printed. */
function packJson(stdout: string): { filename: string; files: { path: string }[] }[] {
  return JSON.parse(stdout.slice(stdout.search(/^\[/m)));
}

t.test('the packed CLI carries its manifest and the commit it was packed from', async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const env = { ...process.env, HOME: dir, npm_config_update_notifier: 'false' };
  // The prepack build must find the built tree up to date. openapi-typescript brings its own TypeScript (5.9) into
  // this package's node_modules/.bin: a bare `tsc -b` ran that one, judged every referenced project out of date
  // (built by 6.0) and rewrote their dist in place, and a CLI test running alongside imported a half-written
  // client.js ("does not provide an export named 'clientFromConfigFile'", a CI run).
  const built = [join(CLI_ROOT, 'dist/src/client.js'), join(ROOT, 'packages/core/dist/src/index.js')];
  const before = built.map((f) => statSync(f).mtimeMs);
  const packed = packJson(execFileSync(process.execPath, [npmCli(), 'pack', '--json', '--pack-destination', dir], { cwd: CLI_ROOT, env, encoding: 'utf8' }));
  const files = packed[0]!.files.map((f) => f.path);
  t.ok(files.includes('oclif.manifest.json') && files.includes(BUILD_INFO_FILE) && files.includes('bin/run.js'), files.join(', '));
  t.notOk(files.some((f) => f.startsWith('dist/src/commands/nodes/')), 'the admin commands are not in the core CLI package');
  t.notOk(existsSync(join(CLI_ROOT, BUILD_INFO_FILE)), 'the source tree keeps no build-info.json after packing');
  t.same(built.map((f) => statSync(f).mtimeMs), before, 'packing rebuilt nothing: the workspace\'s TypeScript found the tree up to date');

  const out = join(dir, 'unpacked');
  mkdirSync(out);
  execFileSync('tar', ['-xzf', join(dir, packed[0]!.filename), '-C', out]);
  const pkg = join(out, 'package');
  const manifest = JSON.parse(readFileSync(join(pkg, 'oclif.manifest.json'), 'utf8')) as { commands: Record<string, unknown> };
  t.ok('serve' in manifest.commands && 'version' in manifest.commands, 'the manifest lists the core commands');
  const commit = gitDescribe(CLI_ROOT);
  t.ok(commit);
  t.same(buildInfo(pkg), { version: (JSON.parse(readFileSync(join(CLI_ROOT, 'package.json'), 'utf8')) as { version: string }).version, commit }, 'outside any checkout, the installed package names the commit it was packed from');
});
