import t from 'tap';
import { createContainer, InjectionMode } from 'awilix';
import { fileURLToPath } from 'node:url';
import { loadAdapter, loadPlugins, adapterPackage, assertStoragePort, defaultConfig, silentLogger, PortAssertionError, STORAGE } from '../src/index.js';

const fixture = (name: string) => fileURLToPath(new URL(`../../test/fixtures/${name}/index.js`, import.meta.url));
const ctx = () => ({ container: createContainer({ injectionMode: InjectionMode.PROXY, strict: true }), config: defaultConfig(), logger: silentLogger });

t.test('short ids map to @headway packages; package names pass through', async (t) => {
  t.equal(adapterPackage('storage', 'sqlite'), '@headway/storage-sqlite');
  t.equal(adapterPackage('policy', 'database'), '@headway/policy-db');
  t.equal(adapterPackage('storage', '@acme/headway-storage'), '@acme/headway-storage');
});

t.test('an unknown id fails at boot listing the known ids', async (t) => {
  await t.rejects(loadAdapter('storage', 'oracle', ctx(), 'database.type'), {
    message: /database\.type: unknown storage adapter "oracle".*known ids: sqlite, postgres, mysql/,
  });
});

t.test('a plugin missing methods is named with every missing method', async (t) => {
  const c = ctx();
  await loadAdapter('storage', fixture('missing-method'), c, 'database.type');
  const storage = c.container.resolve(STORAGE);
  t.throws(() => assertStoragePort(storage, 'fixture-missing-method'), PortAssertionError);
  try { assertStoragePort(storage, 'fixture-missing-method'); } catch (err) {
    t.match((err as Error).message, /adapter fixture-missing-method does not implement the storage port: missing transaction, describe, close, users\.get/);
  }
});

t.test('a plugin that throws in register stops the boot naming it', async (t) => {
  await t.rejects(loadAdapter('storage', fixture('throws-register'), ctx(), 'database.type'), {
    message: /storage adapter .*throws-register.*cannot reach the moon database/,
  });
});

t.test('a plugin for another port is refused', async (t) => {
  await t.rejects(loadAdapter('storage', fixture('notfound-port'), ctx(), 'database.type'), {
    message: /provides the policy port, not storage/,
  });
});

t.test('drive plugins: several load in the listed order; one without grants() stops the boot naming it', async (t) => {
  const grant = (share: string) => ({ src: { kind: 'tag', name: 'tag:a' }, dst: { kind: 'tag', name: 'tag:b' }, shares: [share], access: 'ro' });
  const c = ctx();
  const loaded = await loadPlugins({ plugins: [
    { package: fixture('drive-fixed'), port: 'drive', options: { grants: [grant('first')] } },
    { package: fixture('drive-fixed'), port: 'drive', options: { grants: [grant('second')] } },
  ] }, c);
  t.equal(loaded.drive.length, 2, 'both adapters are loaded');
  t.same(await Promise.all(loaded.drive.map(async (d) => (await d.grants())[0]?.shares[0])), ['first', 'second'], 'in the listed order');
  t.equal(c.container.resolve<unknown[]>('driveAdapters').length, 2, 'and registered as driveAdapters');
  await t.rejects(loadPlugins({ plugins: [{ package: fixture('drive-missing-grants'), port: 'drive', options: {} }] }, ctx()), {
    message: /does not implement the drive port: missing grants/,
  });
});
