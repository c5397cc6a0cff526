import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { Flags } from '@oclif/core';
import { countDump, describeCounts, StorageNotEmptyError, type HeadwayConfig, type StorageCounts, type StoragePort } from '@headway/core/ports';
import { checkPolicy } from '@headway/policy';
import { HeadwayCommand, UsageError, boolFlag } from '../../base.js';
import { openConfiguredStorage, readConfig, runningServerPid } from '../../storage.js';
import { convertHeadscale, type ImportReport, type ReportLine } from '../../migrate/headscale-convert.js';
import { HeadscaleSourceError, readHeadscaleDatabase } from '../../migrate/headscale-db.js';

const CONTROL_KEY = /^privkey:[0-9a-f]{64}$/;

/** NoiseKeyPlan says what happens to Headway's control key file. */
interface NoiseKeyPlan {
  from: string;
  to: string;
  /** action: `copy` (no key there yet), `same` (already this key), `replace` (a different key is there). */
  action: 'copy' | 'same' | 'replace';
}

/** readControlKey reads headscale's noise private key file (`privkey:<64 hex>`, the format Headway uses too). */
function readControlKey(path: string): string {
  if (!existsSync(path)) throw new UsageError(`--noise-key ${path}: no such file (headscale's noise.private_key_path)`);
  if (!statSync(path).isFile()) throw new UsageError(`--noise-key ${path} is not a file`);
  const key = readFileSync(path, 'utf8').trim();
  if (!CONTROL_KEY.test(key)) throw new UsageError(`--noise-key ${path} is not a headscale noise private key (expected privkey:<64 hex digits>)`);
  return key;
}

function line(l: ReportLine): string {
  return `  ${l.kind}${l.id !== null ? ` ${l.id}` : ''}${l.what ? ` ${l.what}` : ''}${l.reason ? `: ${l.reason}` : ''}`;
}

function isEmpty(c: StorageCounts): boolean {
  return Object.values(c).every((n) => !n);
}

/**
 * readTarget counts what the target holds. In a dry run the target is not migrated, so a
 * target without Headway's schema (or with an older one) cannot be read: that is reported
 * as `unmigrated`, not as a failure.
 */
async function readTarget(storage: StoragePort | undefined, dryRun: boolean): Promise<{ held?: StorageCounts; unmigrated: boolean }> {
  if (!storage?.dump) return { unmigrated: false };
  try {
    return { held: countDump(await storage.dump()), unmigrated: false };
  } catch (err) {
    if (dryRun && missingTable(err)) return { unmigrated: true };
    throw err;
  }
}

/**
 * missingTable says a read failed because a table is not there: the target has no Headway
 * schema yet, or an older one (PostgreSQL 42P01, MySQL/MariaDB 1146, SQLite "no such table").
 */
function missingTable(err: unknown): boolean {
  const e = (err ?? {}) as { code?: unknown; errno?: unknown; message?: unknown };
  return e.code === '42P01' || e.code === 'ER_NO_SUCH_TABLE' || e.errno === 1146 || /no such table/i.test(String(e.message ?? ''));
}

export default class MigrateFromHeadscale extends HeadwayCommand {
  static override summary = 'Import a headscale database (0.26 to 0.29) and its control key into Headway';
  static override description = [
    'Reads headscale\'s database (its SQLite file, or a postgres:// URL) and its noise private key, and imports users, nodes (keys, addresses, names, tags, approved routes, expiry), pre-auth keys, API keys and the database-mode policy into the database the config names.',
    'Ids, addresses and key hashes are kept: devices stay joined without logging in again, and headscale\'s API and pre-auth keys keep working. The control key is copied to noise.private_key_path.',
    'Without --apply it only prints what it would import and every record it cannot import, with the reason.',
    '--apply writes everything in one transaction into an empty database; a database holding records, or a different control key, is replaced only when confirmed (--force).',
    'Stop headscale and the Headway server first, then start Headway on headscale\'s server_url so devices find it where they knew headscale.',
  ].join('\n');
  static override examples = [
    '<%= config.bin %> migrate from-headscale --db /var/lib/headscale/db.sqlite --noise-key /var/lib/headscale/noise_private.key',
    '<%= config.bin %> migrate from-headscale --db /var/lib/headscale/db.sqlite --noise-key /var/lib/headscale/noise_private.key --apply',
    '<%= config.bin %> migrate from-headscale --db postgres://headscale:secret@db:5432/headscale --noise-key ./noise_private.key --apply',
  ];
  static override flags = {
    db: Flags.string({ description: 'headscale\'s database: the SQLite file (database.sqlite.path) or a postgres://user:password@host:port/name URL', required: true }),
    'noise-key': Flags.string({ description: 'headscale\'s noise private key file (noise.private_key_path), e.g. /var/lib/headscale/noise_private.key', required: true }),
    apply: boolFlag({ description: 'write the import (without it: a dry run that only prints what it would do)' }),
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(MigrateFromHeadscale);
    const { config } = readConfig(this.configPath);
    const pid = runningServerPid(config.data_dir);
    if (pid !== undefined) {
      throw new Error(`a Headway server (pid ${pid}) is running on the data directory ${config.data_dir}; stop it before importing `
        + '(it would not see the imported records and could write over them)');
    }
    // Everything from headscale is read and checked before the Headway database is opened.
    const noiseFrom = resolve(flags['noise-key']);
    const controlKey = readControlKey(noiseFrom);
    let snapshot;
    try {
      snapshot = await readHeadscaleDatabase(flags.db);
    } catch (err) {
      if (err instanceof HeadscaleSourceError) throw new UsageError(`--db: ${err.message}`);
      throw err;
    }
    const { dump, report } = convertHeadscale(snapshot, { prefixes: config.prefixes });
    this.policyNotes(dump.policy?.text, config, report);

    const noiseTo = resolve(config.noise.private_key_path);
    const noise: NoiseKeyPlan = {
      from: noiseFrom, to: noiseTo,
      action: !existsSync(noiseTo) ? 'copy' : readFileSync(noiseTo, 'utf8').trim() === controlKey ? 'same' : 'replace',
    };

    // A dry run writes nothing: it never creates a SQLite database that is not there yet, and it opens
    // the target without creating or updating Headway's schema (only --apply migrates it).
    const sqlitePath = config.database.type === 'sqlite' ? resolve(config.database.sqlite.path) : undefined;
    const storage: StoragePort | undefined = flags.apply || !sqlitePath || existsSync(sqlitePath)
      ? await openConfiguredStorage(config, { migrate: flags.apply }) : undefined;
    try {
      const target = storage ? storage.describe() : `sqlite ${sqlitePath} (to be created)`;
      const { held, unmigrated } = await readTarget(storage, !flags.apply);
      const counts = countDump(dump);
      const summary = {
        source: snapshot.source, headscaleVersion: snapshot.version, target, dryRun: !flags.apply, counts,
        targetHolds: held && !isEmpty(held) ? held : undefined,
        ...(unmigrated ? { targetSchema: 'missing or older: --apply creates or updates it' } : {}),
        imported: report.imported, skipped: report.skipped, warnings: report.warnings, noiseKey: noise,
      };
      if (!flags.apply) {
        this.print(summary, () => this.describe(summary, report, noise, held, false, unmigrated));
        return;
      }
      if (!storage?.restore) throw new Error(`database.type ${config.database.type}: this storage adapter cannot import records`);
      const replace = held !== undefined && !isEmpty(held);
      if (replace && !(await this.confirm(`${target} already holds ${describeCounts(held)}. Delete them and import headscale's records instead?`))) {
        this.print({ ...summary, result: 'nothing written' }, 'Nothing written.');
        return;
      }
      if (noise.action === 'replace' && !(await this.confirm(`${noiseTo} holds a different control key. Replace it with headscale's (the old one is kept as ${noiseTo}.before-migrate)?`))) {
        this.print({ ...summary, result: 'nothing written' }, 'Nothing written.');
        return;
      }
      try {
        await storage.restore(dump, { replace });
      } catch (err) {
        if (err instanceof StorageNotEmptyError) throw new Error(`${err.message}; run again with --force to replace them`);
        throw err;
      }
      this.installControlKey(noise, controlKey);
      this.print({ ...summary, result: 'imported' }, () => this.describe(summary, report, noise, held, true));
    } finally {
      await storage?.close();
    }
  }

  /** policyNotes warns when the imported policy would not be used or does not parse. */
  private policyNotes(text: string | undefined, config: HeadwayConfig, report: ImportReport): void {
    if (text === undefined) {
      report.warnings.push({ kind: 'policy', id: null, what: '', reason: 'headscale kept no policy in its database; if it used policy.mode file, point Headway\'s policy.path at the same file' });
      return;
    }
    const { errors } = checkPolicy(text);
    if (errors.length) {
      report.warnings.push({ kind: 'policy', id: null, what: '', reason: `Headway does not accept it as it is (${errors.slice(0, 3).map((e) => e.message).join('; ')}); fix it with headway policy set after the import` });
    }
    if (config.policy.mode !== 'database') {
      report.warnings.push({ kind: 'policy', id: null, what: '', reason: `it is imported into the database, which Headway reads only with policy.mode: database (the config says ${config.policy.mode})` });
    }
  }

  /** installControlKey writes headscale's key to noise.private_key_path (0600), keeping a replaced one aside. */
  private installControlKey(plan: NoiseKeyPlan, key: string): void {
    if (plan.action === 'same') return;
    mkdirSync(dirname(plan.to), { recursive: true, mode: 0o700 });
    if (plan.action === 'replace') copyFileSync(plan.to, `${plan.to}.before-migrate`);
    const tmp = `${plan.to}.${process.pid}.tmp`;
    writeFileSync(tmp, `${key}\n`, { mode: 0o600 });
    chmodSync(tmp, 0o600);
    renameSync(tmp, plan.to);
  }

  private describe(s: { source: string; headscaleVersion: string; target: string; counts: StorageCounts }, report: ImportReport,
    noise: NoiseKeyPlan, held: StorageCounts | undefined, applied: boolean, unmigrated = false): string {
    const out: string[] = [`headscale ${s.headscaleVersion} database ${s.source} -> ${s.target}`];
    out.push(`${applied ? 'Imported' : 'Would import'} ${describeCounts(s.counts)}:`);
    out.push(...report.imported.map(line));
    if (report.skipped.length) out.push(`${applied ? 'Not imported' : 'Cannot import'} (${report.skipped.length}):`, ...report.skipped.map(line));
    if (report.warnings.length) out.push(`Warnings (${report.warnings.length}):`, ...report.warnings.map(line));
    const key = {
      copy: `${applied ? 'copied' : 'would copy'} ${noise.from} to ${noise.to}`,
      same: `${noise.to} already holds headscale's key`,
      replace: applied ? `replaced ${noise.to} with ${noise.from} (the old key is in ${noise.to}.before-migrate)`
        : `${noise.to} holds a different key: --apply replaces it with ${noise.from} only when confirmed (--force)`,
    }[noise.action];
    out.push(`Control key: ${key}.`);
    if (!applied) {
      if (held && !isEmpty(held)) out.push(`The target already holds ${describeCounts(held)}: --apply replaces them only when confirmed (--force).`);
      if (unmigrated) out.push('The target has no Headway schema yet, or an older one: --apply creates or updates it first (and replaces records it finds there only when confirmed, --force).');
      out.push('Dry run: nothing written. Run again with --apply to import.');
    } else {
      out.push('Start Headway on headscale\'s server_url (same address and port) so devices find it where they knew headscale.');
    }
    return out.join('\n');
  }
}
