// `headway db backup` and `headway db restore` end to end on each database the
// environment offers, restoring into an empty database of the same kind (see
// backup-roundtrip.ts for the story each case runs).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { inCI, networkDb, roundTrip, sqliteDb, testDatabaseServers } from './backup-roundtrip.js';

t.setTimeout(900_000);

t.test('sqlite: native backup under load, restore into a new SQLite file', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'headway-backup-dbs-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  await roundTrip(t, sqliteDb(dir, 'source.sqlite'), sqliteDb(dir, 'target.sqlite'), undefined);
});

for (const server of testDatabaseServers()) {
  t.test(`${server.type}: JSON backup under load, restore into an empty ${server.type} database`, async (t) => {
    if (!server.admin) {
      if (inCI) t.fail(`${server.variable} is not set, and CI must run the backup test on ${server.type}`);
      else t.skip(`${server.type}: ${server.variable} not set`, () => undefined);
      return;
    }
    await server.scratch((source) => server.scratch((target) =>
      roundTrip(t, networkDb(server.type, source), networkDb(server.type, target), undefined)));
  });
}
