/*
 * audit.tsx: the audit log (GET /api/v1/audit), newest first, a page at a time (older pages by `before`, the last id
 * shown), filtered by actor and action. Says when the storage keeps no log and the entries live in memory only.
 */
import { useState } from 'preact/hooks';
import { call, type Schemas } from '../api.js';
import { Alert, Page, useLoad, when } from '../ui.js';

/** PAGE_SIZE: entries a page shows; enough to fill a screen without a long scroll on a phone. */
export const PAGE_SIZE = 25;

interface Filters { actor: string; action: string }

export function AuditPage(_props: { arg?: string }) {
  const [filters, setFilters] = useState<Filters>({ actor: '', action: '' });
  const [draft, setDraft] = useState<Filters>(filters);
  // The `before` of every page shown so far: the last is the page on screen (undefined: the newest).
  const [cursors, setCursors] = useState<(string | undefined)[]>([undefined]);
  const before = cursors[cursors.length - 1];
  const log = useLoad(
    // One more than a page: whether it came says if there are older entries.
    () => call('get', '/api/v1/audit', { query: { limit: PAGE_SIZE + 1, before, actor: filters.actor, action: filters.action } }),
    [before, filters.actor, filters.action],
  );
  const entries: Schemas['AuditEntry'][] = (log.value?.entries ?? []).slice(0, PAGE_SIZE);
  const hasOlder = (log.value?.entries.length ?? 0) > PAGE_SIZE;

  const apply = (e: Event) => {
    e.preventDefault();
    setFilters({ actor: draft.actor.trim(), action: draft.action.trim() });
    setCursors([undefined]);
  };
  const clear = () => { setDraft({ actor: '', action: '' }); setFilters({ actor: '', action: '' }); setCursors([undefined]); };
  const filtered = filters.actor || filters.action;

  return (
    <Page title="Audit log">
      {log.value && !log.value.persistent ? (
        <p class="alert notice" role="status">This database keeps no audit log: these entries live in the server's memory and are lost when it restarts.</p>
      ) : null}
      <form class="inline-form audit-filters" onSubmit={apply} aria-label="Filter the audit log">
        <span class="pair">
          <label for="audit-actor">Actor</label>
          <input id="audit-actor" placeholder="console:alice" value={draft.actor} onInput={(e) => setDraft({ ...draft, actor: e.currentTarget.value })} />
        </span>
        <span class="pair">
          <label for="audit-action">Action</label>
          <input id="audit-action" placeholder="createUser" value={draft.action} onInput={(e) => setDraft({ ...draft, action: e.currentTarget.value })} />
        </span>
        <button type="submit">Filter</button>
        {filtered ? <button type="button" onClick={clear}>Show all</button> : null}
      </form>
      <Alert error={log.error} />
      <p class="hint" aria-live="polite">
        {log.loading ? 'Loading…' : entries.length
          ? `Showing ${entries.length} ${entries.length === 1 ? 'entry' : 'entries'}${cursors.length > 1 ? `, page ${cursors.length}` : ''}${filtered ? ' matching the filter' : ''}, newest first.`
          : filtered ? 'No entries match the filter.' : 'No changes recorded yet.'}
      </p>
      {entries.length ? (
        <table class="stack audit">
          <caption class="visually-hidden">Audit log entries, newest first</caption>
          <thead><tr><th scope="col">When</th><th scope="col">Actor</th><th scope="col">Action</th><th scope="col">Target</th><th scope="col">From</th></tr></thead>
          <tbody>
            {entries.map((e) => (
              <tr key={e.id}>
                <td data-label="When"><time dateTime={e.at}>{when(e.at)}</time></td>
                <td data-label="Actor">{e.actor}</td>
                <td data-label="Action">{e.action}</td>
                <td data-label="Target">{e.target}</td>
                <td data-label="From">{e.remote || <span class="muted">local socket</span>}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      <nav class="pager" aria-label="Audit log pages">
        <button type="button" disabled={cursors.length < 2} onClick={() => setCursors(cursors.slice(0, -1))}>Newer entries</button>
        <button type="button" disabled={!hasOlder} onClick={() => setCursors([...cursors, entries[entries.length - 1]?.id])}>Older entries</button>
      </nav>
    </Page>
  );
}
