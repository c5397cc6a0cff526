import { useState } from 'preact/hooks';
import { call, type ApiKeyInfo } from '../../api.js';
import { Alert, Confirm, useLoad, when } from '../../ui.js';
import { ExpirySelect, SecretOnce, expired, useAction } from './shared.js';

/** ApiKeys lists, creates and expires API keys (headway apikeys list|create|expire). */
export function ApiKeys() {
  const keys = useLoad(() => call('get', '/api/v1/apikey').then((a) => a.apiKeys));
  const [expiry, setExpiry] = useState('90d');
  const [secret, setSecret] = useState<string>();
  const action = useAction();
  const [doomed, setDoomed] = useState<ApiKeyInfo>();

  const create = (e: Event) => {
    e.preventDefault();
    void action.run(async () => {
      setSecret((await call('post', '/api/v1/apikey', { body: { expiration: expiry || undefined } })).apiKey);
      keys.reload();
      return undefined;
    });
  };
  const expire = (k: ApiKeyInfo) => {
    setDoomed(undefined);
    void action.run(async () => {
      await call('post', '/api/v1/apikey/expire', { body: { id: k.id } });
      keys.reload();
      return `API key ${k.prefix} expired`;
    });
  };

  return (
    <section aria-labelledby="apikeys-title">
      <h2 id="apikeys-title">API keys</h2>
      <form class="key-form" onSubmit={create} aria-label="New API key">
        <ExpirySelect id="api-expiry" value={expiry} onChange={setExpiry} />
        <button type="submit" class="primary">Create API key</button>
      </form>
      {secret
        ? <SecretOnce what="API key" secret={secret} usage="Send it as: Authorization: Bearer <key>" onDone={() => setSecret(undefined)} />
        : null}
      <Alert error={action.error ?? keys.error} notice={action.notice} />
      <table class="stack">
        <caption class="visually-hidden">API keys</caption>
        <thead><tr>
          <th scope="col">Prefix</th><th scope="col">Expires</th><th scope="col">Last seen</th><th scope="col">Created</th>
          <th scope="col"><span class="visually-hidden">Actions</span></th>
        </tr></thead>
        <tbody>
          {(keys.value ?? []).map((k) => (
            <tr key={k.id} data-prefix={k.prefix}>
              <td data-label="Prefix"><code>{k.prefix}</code></td>
              <td data-label="Expires">{k.expiration ? `${expired(k.expiration) ? 'Expired ' : ''}${when(k.expiration)}` : 'Never'}</td>
              <td data-label="Last seen">{k.lastSeen ? when(k.lastSeen) : 'Never'}</td>
              <td data-label="Created">{when(k.createdAt)}</td>
              <td>{expired(k.expiration) ? null
                : <button type="button" class="danger" aria-label={`Expire API key ${k.prefix}`} onClick={() => setDoomed(k)}>Expire</button>}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {keys.value?.length === 0 ? <p>No API keys.</p> : null}
      <Confirm open={!!doomed} title="Expire API key" confirm="Expire" onCancel={() => setDoomed(undefined)} onConfirm={() => doomed && expire(doomed)}>
        <p>Expire API key {doomed?.prefix}? Scripts and tools using it get 401 from now on.</p>
      </Confirm>
    </section>
  );
}
