import t from 'tap';
import { AuditLog, createLogger, type AuditEntry, type AuditRepository } from '../src/index.js';

const DAY = 86_400_000;

t.test('without a repository the latest entries are kept in memory, filtered, paged and pruned by the injected clock', async (t) => {
  let now = Date.UTC(2026, 0, 1);
  const log = new AuditLog(undefined, createLogger({ level: 'error', write: () => undefined }), 30 * DAY, () => new Date(now));
  t.equal(log.persistent, false);
  for (let i = 0; i < 1005; i++) {
    await log.record({ actor: i % 2 ? 'socket' : 'apikey:ab', action: `op${i}`, target: '', remote: '' });
    now += 60_000;
  }
  const all = await log.list({ limit: 2000 });
  t.equal(all.length, 1000, 'the latest 1000 are kept');
  t.same([all[0]!.action, all[999]!.action], ['op1004', 'op5'], 'newest first; the oldest five are gone');
  t.same((await log.list({ limit: 3, actor: 'socket', before: all[0]!.id })).map((e) => e.action), ['op1003', 'op1001', 'op999'], 'actor and before');
  t.same((await log.list({ limit: 5, action: 'op7' })).map((e) => e.id), [8], 'by action');

  now += 30 * DAY - 500 * 60_000;
  const gone = await log.prune();
  t.equal(gone, 500, 'entries older than 30 days of the clock are pruned');
  t.equal((await log.list({ limit: 2000 })).at(-1)!.action, 'op505', 'the oldest kept is just inside the retention');
});

t.test('a repository failure is logged, never thrown at the change it records; retention 0 prunes nothing', async (t) => {
  const lines: string[] = [];
  const failing: AuditRepository = {
    append: async () => { throw new Error('disk full'); },
    list: async () => [] as AuditEntry[],
    prune: async () => { throw new Error('must not be called'); },
  };
  const log = new AuditLog(failing, createLogger({ level: 'info', write: (l) => lines.push(l) }), 0);
  t.equal(log.persistent, true);
  await log.record({ actor: 'socket', action: 'deleteUser', target: 'id=3', remote: '' });
  t.match(lines.join('\n'), /could not be recorded.*deleteUser.*disk full/s, 'the failure is logged with what it was');
  t.equal(await log.prune(), 0, 'retention 0 keeps every entry');
});
