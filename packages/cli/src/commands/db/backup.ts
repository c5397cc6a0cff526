import { chmodSync, closeSync, existsSync, fsyncSync, openSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { Args, Flags } from '@oclif/core';
import { countDump, describeCounts, encodeBackup, type StorageCounts } from '@headway/core/ports';
import { HeadwayCommand, UsageError } from '../../base.js';
import { openConfiguredStorage, readConfig } from '../../storage.js';

/** BACKUP_FORMATS: `native` is the database's own file (SQLite only); `json` restores into any database. */
const BACKUP_FORMATS = ['native', 'json'] as const;

export default class DbBackup extends HeadwayCommand {
  static override summary = 'Back up the database to a file while the server keeps running';
  static override description = [
    'Reads the database named by the config, as the server does, in one consistent snapshot, and writes it to FILE (mode 0600).',
    'SQLite: a SQLite file made with the online backup API, which includes writes still in the WAL (a plain copy of db.sqlite misses them).',
    'PostgreSQL and MySQL: JSON of every table, read in one repeatable-read transaction (no pg_dump or mysqldump needed).',
    '`--format json` works for every database and restores into any of them: the way to move from SQLite to PostgreSQL.',
    'Key secrets are in the backup only as the hashes the database holds. The control key (noise.private_key_path) is not in the database: keep a copy of it too.',
  ].join('\n');
  static override examples = [
    '<%= config.bin %> db backup /var/backups/headway.sqlite',
    '<%= config.bin %> db backup --format json headway.json',
  ];
  static override args = { file: Args.string({ description: 'the backup file to write', required: true }) };
  static override flags = {
    format: Flags.option({ description: 'native (SQLite only; the default there) or json (the default for PostgreSQL and MySQL)', options: BACKUP_FORMATS })(),
  };

  async run(): Promise<void> {
    const { args, flags } = await this.parse(DbBackup);
    const file = resolve(args.file);
    if (!existsSync(dirname(file))) throw new UsageError(`${dirname(file)}: no such directory`);
    if (existsSync(file)) {
      if (statSync(file).isDirectory()) throw new UsageError(`${file} is a directory; give a file name`);
      if (!(await this.confirm(`${file} exists. Overwrite it?`))) {
        this.print({ Result: 'Nothing written' }, 'Nothing written');
        return;
      }
    }
    const { config } = readConfig(this.configPath);
    const storage = await openConfiguredStorage(config);
    let counts: StorageCounts;
    let format: (typeof BACKUP_FORMATS)[number];
    // Written beside the target and renamed over it at the end: no reader ever sees half a backup.
    const tmp = join(dirname(file), `.${basename(file)}.${process.pid}.tmp`);
    try {
      format = flags.format ?? (storage.nativeBackup ? 'native' : 'json');
      if (format === 'native' && !storage.nativeBackup) {
        throw new UsageError(`--format native: database.type ${config.database.type} has no native backup file; use --format json`);
      }
      // Created 0600 before any byte is written, so the backup is never readable by others.
      closeSync(openSync(tmp, 'wx', 0o600));
      try {
        if (format === 'native') {
          await storage.nativeBackup!(tmp);
          // Reading it back proves the file is a complete Headway database, and counts it.
          counts = countDump(await storage.readNativeBackup!(tmp));
        } else {
          const dump = await storage.dump!();
          counts = countDump(dump);
          const fd = openSync(tmp, 'w');
          try {
            writeSync(fd, encodeBackup(dump));
            fsyncSync(fd);
          } finally {
            closeSync(fd);
          }
        }
        chmodSync(tmp, 0o600);
        renameSync(tmp, file);
      } finally {
        for (const f of [tmp, `${tmp}-wal`, `${tmp}-shm`, `${tmp}-journal`]) rmSync(f, { force: true });
      }
    } finally {
      await storage.close();
    }
    const bytes = statSync(file).size;
    this.print({ file, format, database: storage.describe(), bytes, counts },
      `Backed up ${describeCounts(counts)} from ${storage.describe()} to ${file} (${format}, ${bytes} bytes, mode 0600).\n`
      + `Keep a copy of the control key ${config.noise.private_key_path} with it: devices trust that key, and it is not in the database.`);
  }
}
