import type { DnsSettings, DnsSettingsRecord, DnsSettingsRepository } from '@headway/core/ports';
import { lockRow, runTransaction, type Executor, type SqlDialect } from './repositories.js';
import { toDate, toText, type Row } from './rows.js';
import { DNS_SETTINGS_LOCK } from './migrations/0009_dns_settings.js';

/** DNS_SETTINGS_ROW_ID is the id of the single row of `dns_settings` (schema 0009). */
export const DNS_SETTINGS_ROW_ID = 1;

/** settingsText checks a DnsSettings value's shape before it is written (the meaning is checked above storage). */
export function settingsText(s: DnsSettings): string {
  const strings = (v: unknown) => Array.isArray(v) && v.every((x) => typeof x === 'string');
  const ok = s && typeof s === 'object' && strings(s.nameservers) && strings(s.searchDomains)
    && typeof s.magicDns === 'boolean' && typeof s.overrideLocalDns === 'boolean'
    && s.split && typeof s.split === 'object' && !Array.isArray(s.split) && Object.values(s.split).every(strings);
  if (!ok) throw new TypeError('storage: refusing to write dns_settings: not a DnsSettings value');
  const { nameservers, split, searchDomains, magicDns, overrideLocalDns } = s;
  return JSON.stringify({ nameservers, split, searchDomains, magicDns, overrideLocalDns });
}

export function dnsSettingsFromRow(r: Row): DnsSettingsRecord {
  const parsed = JSON.parse(toText(r.settings)) as DnsSettings;
  return {
    settings: {
      nameservers: parsed.nameservers ?? [], split: parsed.split ?? {}, searchDomains: parsed.searchDomains ?? [],
      magicDns: parsed.magicDns === true, overrideLocalDns: parsed.overrideLocalDns === true,
    },
    updatedAt: toDate(r.updated_at, 'dns_settings.updated_at'),
  };
}

/** dnsSettingsRepository keeps the DNS settings of dns.mode: database in the one row of `dns_settings`. */
export function dnsSettingsRepository(db: Executor, dialect: SqlDialect): DnsSettingsRepository {
  const read = async (ex: Executor) => {
    const row = await ex('dns_settings').where({ id: DNS_SETTINGS_ROW_ID }).first();
    return row ? dnsSettingsFromRow(row) : undefined;
  };
  return {
    get: () => read(db),
    async seed(settings) {
      const text = settingsText(settings);
      await db('dns_settings').insert({ id: DNS_SETTINGS_ROW_ID, settings: text, updated_at: new Date() }).onConflict('id').ignore();
      return (await read(db))!;
    },
    async update(change) {
      return runTransaction(db, dialect, async (trx) => {
        await lockRow(trx, DNS_SETTINGS_LOCK);
        const next = change((await read(trx))?.settings);
        const text = settingsText(next);
        const updatedAt = new Date();
        await trx('dns_settings').insert({ id: DNS_SETTINGS_ROW_ID, settings: text, updated_at: updatedAt }).onConflict('id').merge();
        return { settings: JSON.parse(text) as DnsSettings, updatedAt };
      });
    },
  };
}
