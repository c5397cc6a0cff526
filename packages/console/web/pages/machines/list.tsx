/*
 * list.tsx: every machine, with search and filters kept in the hash, and online state updated live.
 */
import { useEffect, useMemo, useState } from 'preact/hooks';
import { Alert, Page, useLoad, when } from '../../ui.js';
import { LIVE_TEXT, useLive } from '../../live.js';
import { EXPIRING_SOON_DAYS, expiryState, filtersHash, loadMachines, matches, readFilters, seenText, TAGGED_OWNER, type Filters, type Machine } from './model.js';

/** Select is a labelled filter with an "any" choice. */
function Select(props: { id: string; label: string; value?: string; any: string; options: Array<[string, string]>; onChange: (v: string | undefined) => void }) {
  return (
    <div class="field">
      <label for={props.id}>{props.label}</label>
      <select id={props.id} value={props.value ?? ''} onChange={(e) => props.onChange(e.currentTarget.value || undefined)}>
        <option value="">{props.any}</option>
        {props.options.map(([v, label]) => <option key={v} value={v}>{label}</option>)}
      </select>
    </div>
  );
}

/** routeState says where a subnet route stands: awaiting approval, approved (and primary, the one peers use), or approved before it is advertised. */
export function routeState(m: Machine, r: string): string {
  if (!m.advertised.includes(r)) return 'approved, not advertised';
  if (!m.approved.includes(r)) return 'awaiting approval';
  return m.primary.includes(r) ? 'primary' : 'approved';
}

/** RouteState is routeState, marked when the route awaits approval. */
export function RouteState(props: { m: Machine; route: string }) {
  const state = routeState(props.m, props.route);
  return <span class={`route-state${state === 'awaiting approval' ? ' pending' : ''}`}>{state}</span>;
}

/** RouteList lists a machine's subnet routes, each with its state. */
function RouteList(props: { m: Machine }) {
  const { m } = props;
  const all = [...new Set([...m.advertised, ...m.approved])];
  if (!all.length) return <span class="muted">None</span>;
  return <ul class="plain">{all.map((r) => <li key={r}><code>{r}</code> <RouteState m={m} route={r} /></li>)}</ul>;
}

/** exitText: whether a machine offers itself as an exit node and whether that is approved. */
export function exitText(m: Machine): string {
  if (m.exit.advertised && m.exit.approved) return 'Exit node';
  if (m.exit.advertised) return 'Offered, awaiting approval';
  return m.exit.approved ? 'Approved, not offered' : 'Not offered';
}

/** expiryText: when a machine's key expires, in words. */
export function expiryText(m: Machine): string {
  const s = expiryState(m);
  if (s === 'never') return 'Never expires';
  if (s === 'expired') return `Expired ${when(m.expiry)}`;
  return `${s === 'soon' ? 'Expires soon: ' : ''}${when(m.expiry)}`;
}

export function MachineList() {
  const [filters, setFilters] = useState<Filters>(() => readFilters(location.hash));
  const machines = useLoad(loadMachines);
  useEffect(() => {
    // A hash typed or followed to other filters (the page itself stays): read them.
    const onHash = () => setFilters(readFilters(location.hash));
    addEventListener('hashchange', onHash);
    return () => removeEventListener('hashchange', onHash);
  }, []);
  const live = useLive({
    node: (e) => machines.setValue((list) => list?.map((m) => (m.id === e.id
      ? { ...m, online: e.online ?? m.online, lastSeen: e.lastSeen !== undefined ? e.lastSeen : m.lastSeen }
      : m))),
    changed: () => machines.reload(),
  });
  const set = (patch: Partial<Filters>) => {
    const next = { ...filters, ...patch };
    for (const k of Object.keys(next) as Array<keyof Filters>) if (!next[k]) delete next[k];
    setFilters(next);
    // replaceState: the hash keeps the filters for a reload without a hashchange (which would reopen the page).
    history.replaceState(null, '', filtersHash(next));
  };
  const all = machines.value ?? [];
  const shown = useMemo(() => all.filter((m) => matches(m, filters)), [all, filters]);
  const owners = [...new Set([...all.map((m) => m.owner), ...(filters.user ? [filters.user] : [])])].sort();
  const tags = [...new Set([...all.flatMap((m) => m.tags), ...(filters.tag ? [filters.tag] : [])])].sort();
  const filtered = Object.keys(filters).length > 0;

  return (
    <Page title="Machines" actions={<span class={`live live-${live}`}>{LIVE_TEXT[live]}</span>}>
      <form class="filters" role="search" aria-label="Filter machines" onSubmit={(e) => e.preventDefault()}>
        <div class="field search">
          <label for="machine-search">Search</label>
          <input id="machine-search" type="search" placeholder="Name, address, tag" value={filters.q ?? ''} onInput={(e) => set({ q: e.currentTarget.value || undefined })} />
        </div>
        <Select id="filter-user" label="Owner" any="Any owner" value={filters.user} onChange={(user) => set({ user })}
          options={owners.map((o) => [o, o === TAGGED_OWNER ? 'Tagged devices' : o])} />
        <Select id="filter-tag" label="Tag" any="Any tag" value={filters.tag} onChange={(tag) => set({ tag })} options={tags.map((x) => [x, x])} />
        <Select id="filter-status" label="Status" any="Online or offline" value={filters.status} onChange={(v) => set({ status: v as Filters['status'] })}
          options={[['online', 'Online'], ['offline', 'Offline']]} />
        <Select id="filter-routes" label="Subnet routes" any="With or without" value={filters.routes} onChange={(v) => set({ routes: v as Filters['routes'] })}
          options={[['any', 'Has routes'], ['pending', 'Awaiting approval']]} />
        <Select id="filter-exit" label="Exit node" any="Any" value={filters.exit} onChange={(v) => set({ exit: v as Filters['exit'] })} options={[['yes', 'Exit nodes']]} />
        <Select id="filter-expiry" label="Key expiry" any="Any" value={filters.expiry} onChange={(v) => set({ expiry: v as Filters['expiry'] })}
          options={[['expired', 'Expired'], ['soon', `Expiring within ${EXPIRING_SOON_DAYS} days`], ['never', 'Never expires']]} />
        {filtered ? <button type="button" class="clear" onClick={() => { setFilters({}); history.replaceState(null, '', filtersHash({})); }}>Clear filters</button> : null}
      </form>
      <Alert error={machines.error} />
      <p class="count" role="status">{machines.value ? `${shown.length} of ${all.length} machines` : 'Loading…'}</p>
      {/* data-filters: the filters this table shows, as the hash spells them (tests wait for it to follow the hash). */}
      <table class="stack machines" data-filters={filtersHash(filters)}>
        <caption class="visually-hidden">Machines</caption>
        <thead>
          <tr>
            <th scope="col">Machine</th><th scope="col">Owner</th><th scope="col">Addresses</th><th scope="col">OS</th><th scope="col">Tags</th>
            <th scope="col">Status</th><th scope="col">Subnet routes</th><th scope="col">Exit node</th><th scope="col">Key expiry</th>
          </tr>
        </thead>
        <tbody>
          {shown.map((m) => (
            <tr key={m.id} data-id={m.id}>
              <td data-label="Machine">
                <a href={`#/machines/${m.id}`} class="machine-name">{m.givenName}</a>
                {m.hostname !== m.givenName ? <div class="muted">{m.hostname}</div> : null}
                {m.ephemeral ? <span class="badge">ephemeral</span> : null}
              </td>
              <td data-label="Owner">{m.owner === TAGGED_OWNER ? <span class="muted">Tagged devices</span> : m.owner}</td>
              <td data-label="Addresses"><ul class="plain">{m.addresses.map((a) => <li key={a}><code>{a}</code></li>)}</ul></td>
              <td data-label="OS">{m.os || <span class="muted">Unknown</span>}{m.clientVersion ? <div class="muted">{m.clientVersion}</div> : null}</td>
              <td data-label="Tags">{m.tags.length ? m.tags.map((x) => <span key={x} class="badge">{x}</span>) : <span class="muted">None</span>}</td>
              <td data-label="Status" class={`status ${m.online ? 'online' : 'offline'}`}>{seenText(m, when)}</td>
              <td data-label="Subnet routes"><RouteList m={m} /></td>
              <td data-label="Exit node" class="exit">{exitText(m)}</td>
              <td data-label="Key expiry" class={`expiry expiry-${expiryState(m)}`}>{expiryText(m)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {machines.value && !shown.length ? <p class="empty">{filtered ? 'No machine matches these filters.' : 'No machines yet. A device joins with `tailscale up --login-server` and a pre-auth key.'}</p> : null}
    </Page>
  );
}
