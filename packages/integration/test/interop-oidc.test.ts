/**
 * Real-client login through a real identity provider: stock tailscaled runs
 * `tailscale up` without a key against a Headway server whose `oidc:` block points
 * at the test provider (oidc-provider, its own process); the test follows the
 * printed AuthURL with an HTTP client, signs in at the provider's form, confirms on
 * Headway's page, and the device comes up as the right user. Then the node's key
 * is expired and `tailscale up` logs in again, keeping the node, its address and
 * its name. Mandatory under CI=true; skipped with a reason elsewhere only when no
 * Tailscale client is installed.
 */
import t from 'tap';
import { confirm, describePage, signIn, Browser } from '@headway/oidc-test-provider';
import { runHeadwayOn } from '../src/cli.js';
import { startOidcSetup } from '../src/oidc.js';
import { cleanupStack, requireTailscale, TailscaleDevice } from '../src/tailscale.js';

interface CliNode { id: string; given_name: string; ip_addresses: string[]; user: { name: string } | null; expiry: string | null; online: boolean }

const JOIN_TIMEOUT_MS = 45_000;

const installed = requireTailscale(t);
for (const binaries of installed) {
  t.test(binaries.version, async (t) => {
    const cleanups = cleanupStack(t);
    const setup = await startOidcSetup({ pkce: { enabled: true } }, { pkceRequired: true });
    cleanups.push(() => setup.provider.stop());
    cleanups.push(() => setup.server.stop());
    const { server, serverUrl } = setup;
    const nodes = async (): Promise<CliNode[]> => {
      const r = await runHeadwayOn(server, ['nodes', 'list', '-o', 'json']);
      if (r.code !== 0) throw new Error(`nodes list: ${r.stderr}`);
      return JSON.parse(r.stdout) as CliNode[];
    };

    const dev = await TailscaleDevice.start({ name: `oidc${binaries.version.replace(/\W/g, '')}`, version: binaries.version });
    cleanups.push(() => dev.stop());
    const browser = new Browser();

    const up = await dev.up({ loginServer: serverUrl, hostname: 'alice-laptop', timeoutMs: JOIN_TIMEOUT_MS });
    t.match(up.authUrl ?? '', new RegExp(`^${serverUrl.replace(/\./g, '\\.')}/register/[A-Za-z0-9_-]+$`), `tailscale up printed the AuthURL ${up.authUrl}`);
    const signedIn = await signIn(up.authUrl!, 'alice', 'alice-pw', { browser });
    t.equal(signedIn.page.status, 200, `confirmation page: ${describePage(signedIn.page)}`);
    const done = await confirm(signedIn);
    t.equal(done.status, 200, describePage(done));
    const st = await dev.waitFor((s) => s.BackendState === 'Running' && Boolean(s.Self?.TailscaleIPs?.length), JOIN_TIMEOUT_MS);
    const alice = server.state.users.byName('alice');
    t.ok(alice, 'user alice created from the provider');
    t.equal(st.Self?.UserID, alice?.id, 'the device runs as alice');
    const user = (st.User ?? {})[String(alice?.id)] as { LoginName?: string; DisplayName?: string } | undefined;
    t.equal(user?.LoginName, 'alice@example.com', 'the client shows the login name user@domain');
    t.equal(user?.DisplayName, 'Alice Liddell', 'and the display name');
    let list = await nodes();
    t.equal(list.length, 1);
    const node = list[0]!;
    t.equal(node.given_name, 'alice-laptop', 'nodes list shows the name');
    t.equal(node.user?.name, 'alice', 'nodes list shows the user');
    t.same([...node.ip_addresses].sort(), [...(st.Self?.TailscaleIPs ?? [])].sort(), 'nodes list shows the address the device has');

    // Expired: the device needs a login again, and a new login keeps the node, its address and name.
    const expired = await runHeadwayOn(server, ['nodes', 'expire', '--identifier', node.id]);
    t.equal(expired.code, 0, expired.stderr);
    await dev.waitFor((s) => s.BackendState === 'NeedsLogin', JOIN_TIMEOUT_MS);
    const again = await dev.up({ loginServer: serverUrl, hostname: 'alice-laptop', timeoutMs: JOIN_TIMEOUT_MS });
    t.ok(again.authUrl, `a new AuthURL: ${again.authUrl}`);
    t.not(again.authUrl, up.authUrl, 'not the old one');
    // The provider's session is still open: no password form this time, straight to the confirmation.
    const second = await signIn(again.authUrl!, 'alice', 'alice-pw', { browser });
    t.equal(second.page.status, 200, describePage(second.page));
    const done2 = await confirm(second);
    t.equal(done2.status, 200, describePage(done2));
    const st2 = await dev.waitFor((s) => s.BackendState === 'Running' && Boolean(s.Self?.TailscaleIPs?.length), JOIN_TIMEOUT_MS);
    list = await nodes();
    t.equal(list.length, 1, 'still one node');
    t.equal(list[0]!.id, node.id, 'the same node');
    t.equal(list[0]!.given_name, 'alice-laptop', 'the same name');
    t.same(list[0]!.ip_addresses, node.ip_addresses, 'the same addresses');
    t.same([...(st2.Self?.TailscaleIPs ?? [])].sort(), [...node.ip_addresses].sort(), 'the device has its old address');
    t.ok(list[0]!.expiry === null || Date.parse(list[0]!.expiry) > Date.now(), 'no longer expired');
    t.notOk(server.logs.join('\n').includes('oidc-test-client-secret'), 'the client secret is not logged');
  });
}
