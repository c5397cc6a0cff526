/*
 * detail.tsx: one machine (#/machines/<id>) and what `headway nodes rename|tag|expire|delete|approve-routes` do to
 * it, each through the same /api/v1 route (and /api/v2's key route to turn expiry back on), the server's refusal
 * shown as it words it.
 */
import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import { call, raw } from '../../api.js';
import { Alert, Confirm, Page, useLoad, when } from '../../ui.js';
import { exitText, expiryText, RouteState } from './list.js';
import { LIVE_TEXT, useLive } from '../../live.js';
import { EXIT_ROUTES, isExitRoute, loadMachine, seenText, TAGGED_OWNER, type Machine } from './model.js';

interface Ask { title: string; text: string; confirm: string; run: () => Promise<unknown> }

/** Row is one fact of the machine in a description list (`class` styles the value). */
function Row(props: { label: string; children: ComponentChildren; class?: string }) {
  return <div><dt>{props.label}</dt><dd class={props.class}>{props.children}</dd></div>;
}

/** splitTags reads tags typed with spaces or commas between them. */
const splitTags = (text: string) => text.split(/[\s,]+/).filter(Boolean);

export function MachineDetail(props: { id: string }) {
  const machine = useLoad(() => loadMachine(props.id), [props.id]);
  const [error, setError] = useState<unknown>();
  const [notice, setNotice] = useState<string>();
  const [ask, setAsk] = useState<Ask>();
  const [gone, setGone] = useState(false);
  const [name, setName] = useState<string>();
  const [tags, setTags] = useState<string>();
  const live = useLive({
    node: (e) => { if (e.id === props.id) machine.setValue((m) => m && { ...m, online: e.online ?? m.online, lastSeen: e.lastSeen !== undefined ? e.lastSeen : m.lastSeen }); },
    changed: (events) => {
      const mine = events?.filter((e) => e.id === props.id);
      if (mine?.length === 0) return;
      if (mine?.some((e) => e.change === 'removed')) { setGone(true); return; }
      machine.reload();
    },
  });
  const m = machine.value;

  /** act runs a change, then says so and re-reads the machine; a refusal shows the server's message. */
  const act = async (done: string, run: () => Promise<unknown>) => {
    try {
      await run();
      setError(undefined);
      setNotice(done);
      machine.reload();
    } catch (err) {
      setNotice(undefined);
      setError(err);
    }
  };
  const approve = (m: Machine, routes: string[]) => call('post', '/api/v1/node/{id}/approve_routes', { params: { id: m.id }, body: { routes } });
  const approved = (m: Machine) => [...m.approved, ...(m.exit.approved ? EXIT_ROUTES : [])];

  if (gone) return <Page title="Machine"><Alert notice="This machine was deleted." /><p><a href="#/machines">All machines</a></p></Page>;
  if (!m) return <Page title="Machine"><Alert error={machine.error} />{machine.error ? null : <p class="loading">Loading…</p>}<p><a href="#/machines">All machines</a></p></Page>;

  const routes = [...new Set([...m.advertised, ...m.approved])].filter((r) => !isExitRoute(r));
  return (
    <Page title={m.givenName} actions={<span class={`live live-${live}`}>{LIVE_TEXT[live]}</span>}>
      <p><a href="#/machines">All machines</a></p>
      {error ? <Alert error={error} /> : <Alert notice={notice} />}
      <dl class="facts">
        <Row label="Status" class={`status ${m.online ? 'online' : 'offline'}`}>{seenText(m, when)}</Row>
        <Row label="Host name">{m.hostname}</Row>
        <Row label="Owner">{m.owner === TAGGED_OWNER ? 'Tagged devices' : m.owner}</Row>
        <Row label="Addresses">{m.addresses.map((a) => <code key={a} class="addr">{a}</code>)}</Row>
        <Row label="OS">{m.os || 'Unknown'}</Row>
        <Row label="Client version">{m.clientVersion || 'Unknown'}</Row>
        <Row label="Key expiry" class="expiry">{expiryText(m)}</Row>
        <Row label="Created">{when(m.createdAt)}</Row>
        {m.ephemeral ? <Row label="Ephemeral">Deleted when it goes offline</Row> : null}
      </dl>

      <section aria-labelledby="rename-h">
        <h2 id="rename-h">Name</h2>
        <form class="inline-form" onSubmit={(e) => { e.preventDefault(); const to = (name ?? m.givenName).trim(); void act(`Renamed to ${to}`, () => call('post', '/api/v1/node/{id}/rename/{newName}', { params: { id: m.id, newName: to } }).then(() => setName(undefined))); }}>
          <label for="machine-name">Machine name</label>
          <input id="machine-name" required value={name ?? m.givenName} onInput={(e) => setName(e.currentTarget.value)} />
          <button type="submit">Rename</button>
        </form>
      </section>

      <section aria-labelledby="tags-h">
        <h2 id="tags-h">Tags</h2>
        <form class="inline-form" onSubmit={(e) => { e.preventDefault(); const list = splitTags(tags ?? m.tags.join(' ')); void act(list.length ? `Tags set to ${list.join(', ')}` : 'Tags removed', () => call('post', '/api/v1/node/{id}/tags', { params: { id: m.id }, body: { tags: list } }).then(() => setTags(undefined))); }}>
          <label for="machine-tags">Tags</label>
          <input id="machine-tags" aria-describedby="tags-help" value={tags ?? m.tags.join(' ')} onInput={(e) => setTags(e.currentTarget.value)} />
          <button type="submit">Set tags</button>
        </form>
        <p id="tags-help" class="muted">Separate tags with spaces, such as <code>tag:web tag:prod</code>. Each must be in the policy's tagOwners.</p>
      </section>

      <section aria-labelledby="routes-h">
        <h2 id="routes-h">Subnet routes</h2>
        {routes.length ? (
          <table class="stack routes">
            <caption class="visually-hidden">Subnet routes of {m.givenName}</caption>
            <thead><tr><th scope="col">Route</th><th scope="col">State</th><th scope="col"><span class="visually-hidden">Actions</span></th></tr></thead>
            <tbody>
              {routes.map((r) => {
                const on = m.approved.includes(r);
                return (
                  <tr key={r}>
                    <td data-label="Route"><code>{r}</code></td>
                    <td data-label="State"><RouteState m={m} route={r} /></td>
                    <td>
                      {on
                        ? <button type="button" aria-label={`Unapprove route ${r}`} onClick={() => void act(`Route ${r} no longer approved`, () => approve(m, approved(m).filter((x) => x !== r)))}>Unapprove</button>
                        : <button type="button" class="primary" aria-label={`Approve route ${r}`} onClick={() => void act(`Route ${r} approved`, () => approve(m, [...approved(m), r]))}>Approve</button>}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        ) : <p class="muted">This machine advertises no subnet route (<code>tailscale set --advertise-routes</code>).</p>}
      </section>

      <section aria-labelledby="exit-h">
        <h2 id="exit-h">Exit node</h2>
        <p class="exit">{exitText(m)}</p>
        {m.exit.approved
          ? <button type="button" onClick={() => void act('Exit node no longer approved', () => approve(m, m.approved))}>Remove exit node approval</button>
          : m.exit.advertised ? <button type="button" class="primary" onClick={() => void act('Exit node approved', () => approve(m, [...m.approved, ...EXIT_ROUTES]))}>Approve exit node</button> : null}
      </section>

      <section aria-labelledby="key-h">
        <h2 id="key-h">Key</h2>
        <div class="button-row">
          <button type="button" class="danger" onClick={() => setAsk({ title: 'Expire key', confirm: 'Expire key', text: `Expire the key of ${m.givenName} now? The device must log in again.`, run: () => act(`The key of ${m.givenName} expired`, () => call('post', '/api/v1/node/{id}/expire', { params: { id: m.id } })) })}>Expire key now</button>
          {m.expiry
            ? <button type="button" onClick={() => void act('Key expiry disabled', () => call('post', '/api/v1/node/{id}/expire', { params: { id: m.id }, body: { disableExpiry: true } }))}>Disable key expiry</button>
            : <button type="button" onClick={() => void act('Key expiry enabled', () => raw('POST', `/api/v2/device/${encodeURIComponent(m.id)}/key`, { body: { keyExpiryDisabled: false } }))}>Enable key expiry</button>}
        </div>
      </section>

      <section aria-labelledby="delete-h">
        <h2 id="delete-h">Delete</h2>
        <button type="button" class="danger" onClick={() => setAsk({ title: 'Delete machine', confirm: 'Delete machine', text: `Delete ${m.givenName}? It is logged out and its peers lose it at once. This cannot be undone.`, run: async () => {
          try {
            await call('delete', '/api/v1/node/{id}', { params: { id: m.id } });
            location.hash = '#/machines';
          } catch (err) { setError(err); }
        } })}>Delete machine</button>
      </section>

      <Confirm open={!!ask} title={ask?.title ?? ''} confirm={ask?.confirm ?? ''} onCancel={() => setAsk(undefined)} onConfirm={() => { const a = ask; setAsk(undefined); void a?.run(); }}>
        <p>{ask?.text}</p>
      </Confirm>
    </Page>
  );
}
