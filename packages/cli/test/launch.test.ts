// Unit tests of the start-up pieces: where user plugins live, which core plugins get their
// manifests refreshed, and what `headway version` reports as the commit.
import { execFileSync } from 'node:child_process';
import { mkdirSync, realpathSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultConfig } from '@headway/core/ports';
import t from 'tap';
import { BUILD_INFO_FILE, buildInfo, gitDescribe } from '../src/build-info.js';
import { pluginsDir, sourcePluginRoots } from '../src/launch.js';
import { tempDir } from './helpers.js';

const CLI_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const ADMIN_ROOT = realpathSync(fileURLToPath(new URL('../../../cli-admin/', import.meta.url)));

t.test('pluginsDir is under $XDG_DATA_HOME/headway, apart from the server\'s default data_dir', async (t) => {
  t.equal(pluginsDir({ XDG_DATA_HOME: '/x/data' }, '/home/ada'), '/x/data/headway/plugins');
  t.equal(pluginsDir({}, '/home/ada'), '/home/ada/.local/share/headway/plugins');
  for (const env of [{}, { XDG_DATA_HOME: '/x/data' }]) {
    const serverData = defaultConfig({ env, home: '/home/ada' }).data_dir;
    t.not(pluginsDir(env, '/home/ada'), serverData, `not the server's data_dir (${serverData})`);
  }
});

t.test('sourcePluginRoots picks core plugins checked out as source, not installed packages', async (t) => {
  const roots = sourcePluginRoots(CLI_ROOT, ['@headway/cli-admin', '@oclif/plugin-help', '@headway/no-such-plugin']);
  t.same(roots, [ADMIN_ROOT], 'the workspace admin plugin only: @oclif/plugin-help ships its manifest, a missing one is skipped');
});

t.test('buildInfo: a packed record first, else git describe of this repository, else unknown', async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const git = (...args: string[]) => execFileSync('git', ['-c', 'user.name=test', '-c', 'user.email=test@example.com', ...args], { cwd: dir, stdio: 'pipe', encoding: 'utf8' });
  const pkg = join(dir, 'packages', 'cli');
  mkdirSync(pkg, { recursive: true });
  writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name: '@headway/cli', version: '9.9.9' }));

  t.same(buildInfo(pkg), { version: '9.9.9', commit: 'unknown' }, 'no record, no checkout');
  git('init', '-q');
  git('add', '.');
  git('commit', '-qm', 'first');
  git('tag', 'v9.9.9');
  t.same(buildInfo(pkg), { version: '9.9.9', commit: 'v9.9.9' }, 'a checkout: its tag');
  writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name: '@headway/cli', version: '9.9.9', description: 'changed' }));
  t.equal(buildInfo(pkg).commit, 'v9.9.9-dirty', 'local changes are flagged');
  t.equal(gitDescribe(dir), undefined, 'a directory that is not the checkout\'s packages/cli is not described by its git');
  writeFileSync(join(pkg, BUILD_INFO_FILE), JSON.stringify({ commit: 'v1.2.3-4-gabcdef0' }));
  t.equal(buildInfo(pkg).commit, 'v1.2.3-4-gabcdef0', 'a packed record wins');
});
