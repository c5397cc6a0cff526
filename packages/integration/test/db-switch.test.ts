// Switching databases with `headway db backup` and `headway db restore`: a SQLite
// server's backup (JSON, and the native SQLite file) restored into PostgreSQL and MariaDB,
// then the device comes back on a server over the new database (backup-roundtrip.ts).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { inCI, networkDb, roundTrip, sqliteDb, testDatabaseServers } from './backup-roundtrip.js';

t.setTimeout(900_000);

for (const server of testDatabaseServers()) {
  t.test(`switching databases: sqlite ${server.type === 'postgres' ? 'JSON' : 'native'} backup restored into ${server.type}`, async (t) => {
    if (!server.admin) {
      if (inCI) t.fail(`${server.variable} is not set, and CI must run the backup test on ${server.type}`);
      else t.skip(`${server.type}: ${server.variable} not set`, () => undefined);
      return;
    }
    const dir = mkdtempSync(join(tmpdir(), 'headway-backup-dbs-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    await server.scratch((target) =>
      roundTrip(t, sqliteDb(dir, 'source.sqlite'), networkDb(server.type, target), server.type === 'postgres' ? 'json' : 'native'));
  });
}
