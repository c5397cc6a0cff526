/**
 * The shared-secret identity plugin against the real server: a device's AuthURL
 * leads to the plugin's form; a wrong passphrase is refused with Headway's refusal
 * page and registers nothing; the right one, after Headway's confirmation step,
 * registers the node to the typed user name; the passphrase never reaches the log.
 */
import t, { type Test } from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Browser, confirm, describePage, signIn } from '@headway/oidc-test-provider';
import { TestDevice } from '@headway/testkit';
import { startTestServer } from '@headway/integration';

const PKG = '@headway-examples/plugin-identity-shared-secret';
const PASSPHRASE = 'lab-passphrase-7f3c9e1d';

async function setup(t: Test) {
  const dir = mkdtempSync(join(tmpdir(), 'hw-shared-secret-'));
  const file = join(dir, 'passphrase');
  writeFileSync(file, `${PASSPHRASE}\n`, { mode: 0o600 });
  const s = await startTestServer({ plugins: [{ package: PKG, port: 'identity', options: { passphrase_path: file } }] }, { logLevel: 'trace' });
  t.teardown(() => s.stop());
  return s;
}

/** waitingDevice is a device that asked to register without a key and got an AuthURL. */
async function waitingDevice(t: Test, s: Awaited<ReturnType<typeof startTestServer>>, hostname: string): Promise<string> {
  const d = new TestDevice({ serverUrl: s.urls.http, hostname });
  t.teardown(() => d.close());
  await d.connect();
  const reply = await d.register({});
  t.match(reply.AuthURL ?? '', /\/register\//, 'the device got an AuthURL');
  return reply.AuthURL!;
}

t.test('the AuthURL leads to the form; a wrong passphrase is refused; the right one registers the node to the typed user', async (t) => {
  const s = await setup(t);

  const authUrl = await waitingDevice(t, s, 'lab-box');
  const browser = new Browser();
  const form = await browser.follow(authUrl);
  t.equal(form.status, 200, describePage(form));
  t.match(form.body, /name="login"/, 'the form asks for a user name');
  t.match(form.body, /name="password"[^>]*type="password"/, 'and for the passphrase');

  const wrong = await signIn(authUrl, 'mallory', 'not-the-passphrase', { browser: new Browser() });
  t.equal(wrong.page.status, 403, describePage(wrong.page));
  t.match(wrong.page.body, /Login refused/);
  t.match(wrong.page.body, /user name or passphrase is wrong/);
  t.equal(s.state.nodes.list().length, 0, 'no node after a wrong passphrase');
  t.equal(s.state.users.list().length, 0, 'no user after a wrong passphrase');
  t.match(s.logs.join('\n'), /WRN login refused provider=shared-secret/, 'the refusal is logged');

  const authUrl2 = await waitingDevice(t, s, 'lab-box-2');
  const right = await signIn(authUrl2, 'Alice', PASSPHRASE);
  t.equal(right.page.status, 200, describePage(right.page));
  t.match(right.page.body, /Log in lab-box-2\?/, "Headway's confirmation page");
  t.equal(s.state.nodes.list().length, 0, 'nothing registered before the person confirms');
  const done = await confirm(right);
  t.equal(done.status, 200, describePage(done));
  const nodes = s.state.nodes.list();
  t.equal(nodes.length, 1, 'one node registered');
  const user = s.state.users.get(nodes[0]!.userId!);
  t.match(user, { name: 'alice', provider: 'shared-secret', providerId: 'shared-secret/alice' }, 'registered to the typed user name');

  const replay = await right.browser.follow(right.browser.visited.find((u) => u.includes('/shared-secret/callback'))!);
  t.equal(replay.status, 400, 'a callback is single use');

  // The first device's login was refused, not used: its AuthURL still works for the right person.
  const late = await confirm(await signIn(authUrl, 'alice', PASSPHRASE));
  t.equal(late.status, 200, describePage(late));
  t.equal(s.state.nodes.list().length, 2, 'the second device of alice');
  t.equal(s.state.users.list().length, 1, 'same user for the same name');

  const log = s.logs.join('\n');
  t.match(log, /TRC /, 'the log ran at trace level');
  t.notOk(log.includes(PASSPHRASE), 'the passphrase never appears in the log');
  t.notOk(log.includes('not-the-passphrase'), 'nor does a wrong one');
});

t.test('a callback without the browser that began the login is refused', async (t) => {
  const s = await setup(t);
  const authUrl = await waitingDevice(t, s, 'victim-box');
  const attacker = new Browser();
  const form = await attacker.follow(authUrl);
  const action = new URL(/action="([^"]+)"/.exec(form.body)![1]!.replace(/&#38;/g, '&'), form.url);
  const back = await attacker.request(action.href, { form: { login: 'alice', password: PASSPHRASE } });
  t.equal(back.status, 303);
  const fresh = new Browser();
  const page = await fresh.follow(back.headers.get('location')!);
  t.equal(page.status, 400, describePage(page));
  t.equal(s.state.nodes.list().length, 0, 'no node');
});

t.test('bad options stop the start-up naming each one', async (t) => {
  await t.rejects(startTestServer({ plugins: [{ package: PKG, port: 'identity', options: { passphrase: 'x', listen: 'nowhere' } }] }), {
    message: /option "passphrase": unknown option[\s\S]*option "passphrase_path": required[\s\S]*option "listen": expected host:port/,
  });
  const dir = mkdtempSync(join(tmpdir(), 'hw-shared-secret-'));
  writeFileSync(join(dir, 'empty'), '\n');
  await t.rejects(startTestServer({ plugins: [{ package: PKG, port: 'identity', options: { passphrase_path: join(dir, 'empty') } }] }), { message: /is empty/ });
});
