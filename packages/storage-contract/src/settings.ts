import type { Test } from 'tap';
import type { DnsSettings, StoragePort } from '@headway/core/ports';

/**
 * settingsContract covers the single-row settings: the policy's compare-and-set (a check run in the write, after a
 * lock, so concurrent conditional writes cannot both pass) and the DNS settings (seeded once, updated under a lock,
 * a throwing change writing nothing). The DNS part runs where the adapter has `dnsSettings`.
 */
export async function settingsContract(t: Test, storage: StoragePort): Promise<void> {
  await t.test('policy: set with a check runs it on the stored text; a throwing check writes nothing', async (t) => {
    const start = await storage.policy.get();
    const seen: Array<string | undefined> = [];
    await storage.policy.set('{"acls": [] /* v1 */}', { check: (cur) => { seen.push(cur?.text); } });
    t.same(seen, [start?.text], 'the check saw what was stored');
    await t.rejects(storage.policy.set('{"acls": [] /* v2 */}', { check: () => { throw new Error('stale'); } }), /stale/);
    t.equal((await storage.policy.get())?.text, '{"acls": [] /* v1 */}', 'the refused write changed nothing');
  });

  await t.test('policy: 10 concurrent sets expecting the same text: exactly one passes its check', async (t) => {
    const base = (await storage.policy.get())?.text;
    const outcomes = await Promise.allSettled(Array.from({ length: 10 }, (_, i) => storage.policy.set(`{"acls": [] /* race ${i} */}`, {
      check: (cur) => { if (cur?.text !== base) throw new Error('changed meanwhile'); },
    })));
    t.equal(outcomes.filter((o) => o.status === 'fulfilled').length, 1, 'one write');
    t.ok(outcomes.every((o) => o.status === 'fulfilled' || /changed meanwhile|retried/.test(String((o as PromiseRejectedResult).reason))),
      'the others were refused by their check (or asked to be retried), none failed otherwise');
  });

  const repo = storage.dnsSettings;
  if (!repo) return;
  await t.test('dns settings: seeded once, updated whole, a throwing change writes nothing', async (t) => {
    const first: DnsSettings = { nameservers: ['1.1.1.1'], split: { 'corp.example.com': ['10.0.0.53'] }, searchDomains: ['a.example'], magicDns: true, overrideLocalDns: false };
    const seeded = await repo.seed(first);
    const stored = seeded.settings;
    t.type(seeded.updatedAt, Date);
    const again = await repo.seed({ ...first, nameservers: ['9.9.9.9'] });
    t.same(again.settings, stored, 'a second seed keeps what is stored');
    const next = await repo.update((cur) => ({ ...cur!, nameservers: ['8.8.8.8', 'https://dns.example/q'], split: { 'ü.example': ['fd00::53'] } }));
    t.same(next.settings.nameservers, ['8.8.8.8', 'https://dns.example/q']);
    t.same((await repo.get())?.settings, next.settings, 'read back as written, unicode keys included');
    await t.rejects(repo.update(() => { throw new Error('bad value'); }), /bad value/);
    t.same((await repo.get())?.settings, next.settings, 'the refused change wrote nothing');
  });

  await t.test('dns settings: 10 concurrent updates each adding a domain lose none', async (t) => {
    await Promise.all(Array.from({ length: 10 }, (_, i) => repo.update((cur) => ({ ...cur!, split: { ...cur!.split, [`d${i}.example`]: [`10.0.0.${i + 1}`] } }))));
    const split = (await repo.get())!.settings.split;
    t.equal(Array.from({ length: 10 }, (_, i) => `d${i}.example`).filter((d) => split[d]).length, 10);
  });
}
