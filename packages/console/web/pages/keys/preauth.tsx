import { useState } from 'preact/hooks';
import { call, type ApiPreAuthKey } from '../../api.js';
import { Alert, Confirm, useLoad, when } from '../../ui.js';
import { ExpirySelect, SecretOnce, expired, useAction } from './shared.js';

/** status names a pre-auth key's state for the list. */
function status(k: ApiPreAuthKey): string {
  if (expired(k.expiration)) return 'Expired';
  if (k.used && !k.reusable) return 'Used';
  return k.used ? 'Active (used)' : 'Active';
}

/** PreAuthKeys lists, creates and expires pre-auth keys (headway preauthkeys list|create|expire). */
export function PreAuthKeys() {
  const keys = useLoad(() => call('get', '/api/v1/preauthkey').then((a) => a.preAuthKeys));
  const users = useLoad(() => call('get', '/api/v1/user').then((a) => a.users));
  const [user, setUser] = useState('');
  const [reusable, setReusable] = useState(false);
  const [ephemeral, setEphemeral] = useState(false);
  const [tags, setTags] = useState('');
  const [expiry, setExpiry] = useState('1h');
  const [secret, setSecret] = useState<string>();
  const action = useAction();
  const [doomed, setDoomed] = useState<ApiPreAuthKey>();

  const create = (e: Event) => {
    e.preventDefault();
    const aclTags = tags.split(/[\s,]+/).filter(Boolean);
    void action.run(async () => {
      const a = await call('post', '/api/v1/preauthkey', {
        body: { user: user || undefined, reusable, ephemeral, aclTags, expiration: expiry || undefined },
      });
      setSecret(a.preAuthKey.key);
      keys.reload();
      return undefined;
    });
  };
  const expire = (k: ApiPreAuthKey) => {
    setDoomed(undefined);
    void action.run(async () => {
      await call('post', '/api/v1/preauthkey/expire', { body: { id: k.id } });
      keys.reload();
      return `Pre-auth key ${k.id} expired`;
    });
  };

  return (
    <section aria-labelledby="preauth-title">
      <h2 id="preauth-title">Pre-auth keys</h2>
      <form class="key-form" onSubmit={create} aria-label="New pre-auth key">
        <div class="field">
          <label for="pak-user">User</label>
          <select id="pak-user" value={user} onChange={(e) => setUser(e.currentTarget.value)} aria-describedby="pak-user-hint">
            <option value="">None (tags only)</option>
            {(users.value ?? []).map((u) => <option key={u.id} value={u.name}>{u.name}</option>)}
          </select>
          <span id="pak-user-hint" class="key-hint">A key without a user needs tags.</span>
        </div>
        <div class="field">
          <label for="pak-tags">Tags</label>
          <input id="pak-tags" value={tags} placeholder="tag:server, tag:web" aria-describedby="pak-tags-hint" onInput={(e) => setTags(e.currentTarget.value)} />
          <span id="pak-tags-hint" class="key-hint">Separated by commas or spaces.</span>
        </div>
        <ExpirySelect id="pak-expiry" value={expiry} onChange={setExpiry} />
        <div class="checks">
          <label><input type="checkbox" checked={reusable} onChange={(e) => setReusable(e.currentTarget.checked)} /> Reusable</label>
          <label><input type="checkbox" checked={ephemeral} onChange={(e) => setEphemeral(e.currentTarget.checked)} /> Ephemeral</label>
        </div>
        <button type="submit" class="primary">Create pre-auth key</button>
      </form>
      {secret
        ? <SecretOnce what="pre-auth key" secret={secret} usage="Use it as: tailscale up --login-server <this server> --authkey <key>" onDone={() => setSecret(undefined)} />
        : null}
      <Alert error={action.error ?? keys.error ?? users.error} notice={action.notice} />
      <table class="stack">
        <caption class="visually-hidden">Pre-auth keys</caption>
        <thead><tr>
          <th scope="col">Key</th><th scope="col">User</th><th scope="col">Tags</th><th scope="col">Reusable</th><th scope="col">Ephemeral</th>
          <th scope="col">Status</th><th scope="col">Expires</th><th scope="col">Created</th><th scope="col"><span class="visually-hidden">Actions</span></th>
        </tr></thead>
        <tbody>
          {(keys.value ?? []).map((k) => (
            <tr key={k.id} data-key-id={k.id}>
              <td data-label="Key"><code>{k.key}</code></td>
              <td data-label="User">{k.user?.name ?? '(tags only)'}</td>
              <td data-label="Tags">{k.aclTags.join(', ')}</td>
              <td data-label="Reusable">{k.reusable ? 'Yes' : 'No'}</td>
              <td data-label="Ephemeral">{k.ephemeral ? 'Yes' : 'No'}</td>
              <td data-label="Status">{status(k)}</td>
              <td data-label="Expires">{k.expiration ? when(k.expiration) : 'Never'}</td>
              <td data-label="Created">{when(k.createdAt)}</td>
              <td>{expired(k.expiration) ? null
                : <button type="button" class="danger" aria-label={`Expire pre-auth key ${k.id}`} onClick={() => setDoomed(k)}>Expire</button>}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {keys.value?.length === 0 ? <p>No pre-auth keys.</p> : null}
      <Confirm open={!!doomed} title="Expire pre-auth key" confirm="Expire" onCancel={() => setDoomed(undefined)} onConfirm={() => doomed && expire(doomed)}>
        <p>Expire pre-auth key {doomed?.id}{doomed?.user ? ` of ${doomed.user.name}` : ''}? It stops registering machines now; machines it registered stay.</p>
      </Confirm>
    </section>
  );
}
