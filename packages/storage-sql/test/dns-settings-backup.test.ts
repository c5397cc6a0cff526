// The DNS settings of dns.mode: database travel in a dump and a restore, on SQLite, PostgreSQL and MySQL/MariaDB:
// a restore puts the backup's settings in place of ones a server seeded from its config file at start, without
// calling that database "not empty"; a dump of a database without settings restores none.
import t, { type Test } from 'tap';
import type { DnsSettings, StoragePort } from '@headway/core/ports';
import { StorageNotEmptyError } from '@headway/core/ports';
import { freshDatabases, type Opener } from './databases.js';

const saved: DnsSettings = {
  nameservers: ['9.9.9.9', 'https://dns.example/dns-query'], split: { 'corp.example.com': ['10.0.0.53', 'fd00::53'] },
  searchDomains: ['corp.example.com'], magicDns: true, overrideLocalDns: true,
};
const seeded: DnsSettings = { nameservers: ['1.1.1.1'], split: {}, searchDomains: [], magicDns: false, overrideLocalDns: false };

async function suite(t: Test, name: string, openSource: Opener, openTarget: Opener): Promise<void> {
  const source: StoragePort = await openSource();
  await source.users.create({ name: 'alice' });
  await source.dnsSettings!.update(() => saved);
  const dump = await source.dump!();
  t.same(dump.dnsSettings?.settings, saved, `${name}: the dump holds the stored settings`);

  const target: StoragePort = await openTarget();
  await target.dnsSettings!.seed(seeded);
  await target.restore!(dump);
  t.same((await target.dnsSettings!.get())?.settings, saved, `${name}: a restore replaces settings seeded at start, which do not make the database "not empty"`);
  t.same((await target.users.list()).map((u) => u.name), ['alice'], 'with the rest of the records');

  const refused = await target.restore!(dump).then(() => undefined, (e: unknown) => e);
  t.type(refused, StorageNotEmptyError, 'a database holding records is still refused without replace');
  t.same((await target.dnsSettings!.get())?.settings, saved, 'and keeps its settings');

  const { dnsSettings: _none, ...withoutSettings } = dump;
  await target.restore!({ ...withoutSettings, dnsSettings: null }, { replace: true });
  t.equal(await target.dnsSettings!.get(), undefined, `${name}: replacing with a dump without settings leaves none`);
}

for (const db of freshDatabases(t, 'dns-backup')) {
  await t.test(db.name, (t) => db.fresh((openSource) => db.fresh((openTarget) => suite(t, db.name, openSource, openTarget))));
}
