/*
 * dns.tsx: the DNS devices receive. With dns.mode: database the settings (MagicDNS, nameservers, split DNS, search
 * domains) are a form saved in one change through /api/v2/tailnet/-/dns/configuration; with dns.mode: file they are
 * shown with the config keys that hold them. Extra records are read-only, each with where it is set.
 */
import { useState } from 'preact/hooks';
import { call, raw } from '../api.js';
import { Alert, Page, useLoad } from '../ui.js';

/** DnsConfiguration is /api/v2's whole DNS configuration (Tailscale's shape). */
interface DnsConfiguration {
  nameservers?: { address: string }[];
  splitDNS?: Record<string, { address: string }[]>;
  searchPaths?: string[];
  preferences?: { overrideLocalDNS?: boolean; magicDNS?: boolean };
}

const CONFIGURATION = '/api/v2/tailnet/-/dns/configuration';

/** Draft is the form as typed: lists one entry a line, split DNS as rows. */
interface Draft { magicDns: boolean; override: boolean; nameservers: string; search: string; split: { domain: string; servers: string }[] }

const lines = (text: string) => text.split(/[\s,]+/).map((s) => s.trim()).filter(Boolean);

function draftOf(c: DnsConfiguration): Draft {
  return {
    magicDns: !!c.preferences?.magicDNS, override: !!c.preferences?.overrideLocalDNS,
    nameservers: (c.nameservers ?? []).map((r) => r.address).join('\n'),
    search: (c.searchPaths ?? []).join('\n'),
    split: Object.entries(c.splitDNS ?? {}).map(([domain, list]) => ({ domain, servers: list.map((r) => r.address).join(' ') })),
  };
}

function configurationOf(d: Draft): DnsConfiguration {
  const address = (a: string) => ({ address: a });
  return {
    nameservers: lines(d.nameservers).map(address),
    splitDNS: Object.fromEntries(d.split.filter((r) => r.domain.trim()).map((r) => [r.domain.trim(), lines(r.servers).map(address)])),
    searchPaths: lines(d.search),
    preferences: { magicDNS: d.magicDns, overrideLocalDNS: d.override },
  };
}

async function loadDns() {
  const [info, config] = await Promise.all([
    call('get', '/api/v1/dns'),
    raw('GET', CONFIGURATION).then((r) => r.json() as Promise<DnsConfiguration>),
  ]);
  return { info, config };
}

export function DnsPage(_props: { arg?: string }) {
  const dns = useLoad(loadDns);
  const v = dns.value;
  return (
    <Page title="DNS">
      <Alert error={dns.error} />
      {!v ? (dns.loading ? <p class="loading">Loading…</p> : null) : (
        <>
          {v.info.mode === 'database'
            ? <SettingsForm initial={v.config} baseDomain={v.info.baseDomain} onSaved={(config) => dns.setValue({ ...v, config })} />
            : <FileSettings config={v.config} baseDomain={v.info.baseDomain} />}
          <ExtraRecords records={v.info.extraRecords} />
        </>
      )}
    </Page>
  );
}

function SettingsForm(props: { initial: DnsConfiguration; baseDomain: string; onSaved: (c: DnsConfiguration) => void }) {
  const [d, setD] = useState<Draft>(() => draftOf(props.initial));
  const [error, setError] = useState<unknown>();
  const [notice, setNotice] = useState<string>();
  const [busy, setBusy] = useState(false);
  const set = (patch: Partial<Draft>) => { setD({ ...d, ...patch }); setNotice(undefined); };
  const setRow = (i: number, patch: Partial<Draft['split'][number]>) => set({ split: d.split.map((r, k) => (k === i ? { ...r, ...patch } : r)) });

  const save = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    try {
      const res = await raw('POST', CONFIGURATION, { body: configurationOf(d) });
      const saved = await res.json() as DnsConfiguration;
      setD(draftOf(saved));
      props.onSaved(saved);
      setError(undefined);
      setNotice('DNS settings saved; devices receive them now');
    } catch (err) { setError(err); setNotice(undefined); } finally { setBusy(false); }
  };

  return (
    <form class="dns-form" onSubmit={save} aria-describedby="dns-help">
      <p id="dns-help" class="hint">Saved settings are stored (dns.mode: database) and sent to every connected device at once.</p>
      <fieldset>
        <legend>Preferences</legend>
        <div class="check">
          <input type="checkbox" id="dns-magic" checked={d.magicDns} disabled={!props.baseDomain && !d.magicDns} onChange={(e) => set({ magicDns: e.currentTarget.checked })} aria-describedby="dns-magic-help" />
          <label for="dns-magic">MagicDNS</label>
        </div>
        <p id="dns-magic-help" class="hint">{props.baseDomain ? <>Devices resolve each other as <code>name.{props.baseDomain}</code>.</> : <>Needs <code>dns.base_domain</code> in the config file.</>}</p>
        <div class="check">
          <input type="checkbox" id="dns-override" checked={d.override} onChange={(e) => set({ override: e.currentTarget.checked })} />
          <label for="dns-override">Override the devices' local DNS</label>
        </div>
      </fieldset>
      <div class="field">
        <label for="dns-nameservers">Global nameservers</label>
        <textarea id="dns-nameservers" rows={3} value={d.nameservers} aria-describedby="dns-nameservers-help" onInput={(e) => set({ nameservers: e.currentTarget.value })} />
        <span id="dns-nameservers-help" class="hint">One a line: IP addresses or DNS-over-HTTPS URLs.</span>
      </div>
      <div class="field">
        <label for="dns-search">Search domains</label>
        <textarea id="dns-search" rows={2} value={d.search} aria-describedby="dns-search-help" onInput={(e) => set({ search: e.currentTarget.value })} />
        <span id="dns-search-help" class="hint">One a line.</span>
      </div>
      <fieldset>
        <legend>Split DNS</legend>
        <p class="hint">Queries under a domain go to its own nameservers (IP addresses, separated by spaces).</p>
        {d.split.map((r, i) => (
          <div class="split-row" key={i}>
            <label for={`split-domain-${i}`} class="visually-hidden">Domain {i + 1}</label>
            <input id={`split-domain-${i}`} placeholder="corp.example.com" value={r.domain} onInput={(e) => setRow(i, { domain: e.currentTarget.value })} />
            <label for={`split-servers-${i}`} class="visually-hidden">Nameservers for domain {i + 1}</label>
            <input id={`split-servers-${i}`} placeholder="10.0.0.53" value={r.servers} onInput={(e) => setRow(i, { servers: e.currentTarget.value })} />
            <button type="button" aria-label={`Remove split DNS domain ${r.domain || i + 1}`} onClick={() => set({ split: d.split.filter((_, k) => k !== i) })}>Remove</button>
          </div>
        ))}
        <button type="button" onClick={() => set({ split: [...d.split, { domain: '', servers: '' }] })}>Add a domain</button>
      </fieldset>
      <Alert error={error} notice={notice} />
      <div class="form-actions">
        <button type="submit" class="primary" disabled={busy}>Save DNS settings</button>
      </div>
    </form>
  );
}

/** FILE_KEYS: the config keys holding the settings in dns.mode: file. */
const FILE_KEYS = ['dns.magic_dns', 'dns.override_local_dns', 'dns.nameservers.global', 'dns.nameservers.split', 'dns.search_domains'];

function FileSettings(props: { config: DnsConfiguration; baseDomain: string }) {
  const c = props.config;
  const none = <span class="muted">none</span>;
  const list = (xs: string[]) => (xs.length ? xs.join(', ') : none);
  return (
    <>
      <p class="alert notice" role="status" id="dns-read-only">
        These settings come from the config file (<code>dns.mode: file</code>), so they are read-only here. Edit {FILE_KEYS.map((k, i) => <>{i ? ', ' : ''}<code>{k}</code></>)} and
        restart, or set <code>dns.mode: database</code> to change them here.
      </p>
      <dl class="facts">
        <dt>MagicDNS</dt><dd>{c.preferences?.magicDNS ? `on (${props.baseDomain})` : 'off'}</dd>
        <dt>Override local DNS</dt><dd>{c.preferences?.overrideLocalDNS ? 'yes' : 'no'}</dd>
        <dt>Global nameservers</dt><dd>{list((c.nameservers ?? []).map((r) => r.address))}</dd>
        <dt>Search domains</dt><dd>{list(c.searchPaths ?? [])}</dd>
        <dt>Split DNS</dt>
        <dd>{Object.keys(c.splitDNS ?? {}).length ? (
          <ul class="plain">{Object.entries(c.splitDNS ?? {}).map(([dom, rs]) => <li key={dom}><code>{dom}</code>: {rs.map((r) => r.address).join(', ')}</li>)}</ul>
        ) : none}</dd>
      </dl>
    </>
  );
}

function ExtraRecords(props: { records: { name: string; type: string; value: string; source: string }[] }) {
  return (
    <section aria-labelledby="extra-records">
      <h2 id="extra-records">Extra records</h2>
      <p class="hint">
        Read-only here: edit them where each is set (<code>dns.extra_records</code> in the config file, the file <code>dns.extra_records_path</code> names,
        which is re-read when it changes, or a DNS plugin).
      </p>
      {props.records.length ? (
        <table class="stack">
          <caption class="visually-hidden">Extra DNS records</caption>
          <thead><tr><th scope="col">Name</th><th scope="col">Type</th><th scope="col">Value</th><th scope="col">Set in</th></tr></thead>
          <tbody>
            {props.records.map((r, i) => (
              <tr key={i}><td data-label="Name">{r.name}</td><td data-label="Type">{r.type}</td><td data-label="Value">{r.value}</td><td data-label="Set in">{r.source}</td></tr>
            ))}
          </tbody>
        </table>
      ) : <p>None.</p>}
    </section>
  );
}
