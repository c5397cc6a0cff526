import { freePort } from './ports.js';
import { startOidcProvider, type ProviderOptions, type RunningProvider, type TestAccount } from '@headway/oidc-test-provider';
import { startTestServer, type TestServer } from './server.js';

/** CLIENT_SECRET is the test client's secret; tests grep the logs for it. */
export const CLIENT_SECRET = 'oidc-test-client-secret-5f0c1d9a7e';

/** ACCOUNTS are the test provider's people. */
export const ACCOUNTS: TestAccount[] = [
  { login: 'alice', password: 'alice-pw', sub: 'alice-sub', claims: { email: 'alice@example.com', email_verified: true, name: 'Alice Liddell', preferred_username: 'alice', picture: 'https://pictures.example.com/alice.png', groups: ['engineering', 'admins'] } },
  { login: 'bob', password: 'bob-pw', sub: 'bob-sub', claims: { email: 'bob@other.org', email_verified: true, name: 'Bob', preferred_username: 'bob', groups: ['sales'] } },
  { login: 'carol', password: 'carol-pw', sub: 'carol-sub', claims: { email: 'carol@example.com', email_verified: false, name: 'Carol', preferred_username: 'carol', groups: ['engineering'] } },
  { login: 'dave', password: 'dave-pw', sub: 'dave-sub', claims: { email: 'dave@example.com', email_verified: true, name: 'Dave', preferred_username: 'dave.provider' } },
];


export interface OidcSetup { provider: RunningProvider; server: TestServer; serverUrl: string }

/**
 * startOidcSetup runs the test provider as its own process with a client whose
 * redirect URI is a Headway server's callback, then that server with `oidc:` pointing
 * at the provider (plus `oidc` overrides), logging at trace level.
 */
export async function startOidcSetup(oidc: Record<string, unknown> = {}, provider: Partial<ProviderOptions> = {}, raw: Record<string, unknown> = {}): Promise<OidcSetup> {
  const port = await freePort();
  const serverUrl = `http://127.0.0.1:${port}`;
  const p = await startOidcProvider({
    clients: [{ client_id: 'headway', client_secret: CLIENT_SECRET, redirect_uris: [`${serverUrl}/oidc/callback`] }],
    accounts: ACCOUNTS,
    ...provider,
  });
  try {
    const server = await startTestServer({
      listen_addr: `127.0.0.1:${port}`, server_url: serverUrl, ...raw,
      oidc: { issuer: p.issuer, client_id: 'headway', client_secret: CLIENT_SECRET, ...oidc },
    }, { logLevel: 'trace' });
    return { provider: p, server, serverUrl };
  } catch (err) {
    await p.stop();
    throw err;
  }
}
