import { existsSync, readFileSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { Args } from '@oclif/core';
import {
  BackupFormatError, SQLITE_MAGIC, StorageNotEmptyError, countDump, decodeBackup, describeCounts, type StorageDump,
} from '@headway/core/ports';
import { HeadwayCommand, UsageError, boolFlag } from '../../base.js';
import { openConfiguredStorage, readConfig, runningServerPid } from '../../storage.js';

export default class DbRestore extends HeadwayCommand {
  static override summary = 'Restore a backup into the configured database (stop the server first)';
  static override description = [
    'Writes every record of FILE into the database named by the config, in one transaction, keeping ids, key hashes and',
    'addresses, so devices and API keys keep working without registering again. The database must be empty (a new one is',
    'created and migrated as the server would); --replace deletes what it holds first, in the same transaction.',
    'FILE is a JSON backup (restores into SQLite, PostgreSQL or MySQL) or a SQLite backup (restores into any of them too).',
    'Refused while a server runs on the same data directory. Start the server with the same control key afterwards.',
  ].join('\n');
  static override examples = [
    '<%= config.bin %> db restore /var/backups/headway-2026-01-01.sqlite',
    '<%= config.bin %> db restore --replace --force headway.json',
  ];
  static override args = { file: Args.string({ description: 'the backup file to read', required: true }) };
  static override flags = {
    replace: boolFlag({ description: 'delete everything in the database first (same transaction); asks first unless --force' }),
  };

  async run(): Promise<void> {
    const { args, flags } = await this.parse(DbRestore);
    const file = resolve(args.file);
    if (!existsSync(file)) throw new UsageError(`${file}: no such file`);
    if (!statSync(file).isFile()) throw new UsageError(`${file} is not a file`);
    const { config } = readConfig(this.configPath);
    const pid = runningServerPid(config.data_dir);
    if (pid !== undefined) {
      throw new Error(`a Headway server (pid ${pid}) is running on the data directory ${config.data_dir}; stop it before restoring `
        + '(it would not see the restored records and could write over them)');
    }
    // A JSON backup is read and checked whole before the database is even opened.
    const head = readFileSync(file).subarray(0, 16).toString('latin1');
    const native = head === SQLITE_MAGIC;
    let dump: StorageDump | undefined = native ? undefined : decodeBackup(readFileSync(file, 'utf8'), file).dump;

    const storage = await openConfiguredStorage(config);
    try {
      if (native) {
        if (!storage.readNativeBackup) throw new BackupFormatError(`${file} is a SQLite backup, which database.type ${config.database.type} cannot read; restore it into SQLite and back that up with --format json`);
        dump = await storage.readNativeBackup(file);
      }
      if (!storage.restore) throw new Error(`database.type ${config.database.type}: this storage adapter cannot restore backups`);
      if (flags.replace && !(await this.confirm(`Delete every record in ${storage.describe()} and replace them with ${file}?`))) {
        this.print({ Result: 'Nothing restored' }, 'Nothing restored');
        return;
      }
      try {
        await storage.restore(dump!, { replace: flags.replace });
      } catch (err) {
        if (err instanceof StorageNotEmptyError) throw new Error(`${err.message}: pass --replace to delete them first, or point the config at an empty database`);
        throw err;
      }
    } finally {
      await storage.close();
    }
    const counts = countDump(dump!);
    this.print({ file, database: storage.describe(), source: dump!.kind, counts },
      `Restored ${describeCounts(counts)} from ${file} (a ${dump!.kind} backup) into ${storage.describe()}.\n`
      + `Start the server with the control key the devices know (${config.noise.private_key_path}, copied from the old server if this is a new machine).`);
  }
}
