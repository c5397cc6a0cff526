import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { runHeadwayOn } from '../src/cli.js';
import { startTestServer } from '../src/server.js';

// Bad input to the admin CLI (hostile flags on every command): each is a usage error naming what was wrong, and
// nothing changes.
t.setTimeout(300_000);

/** withNode starts a server with user alice owning node box, and the CLI against it. */
async function withNode(t: { teardown(fn: () => unknown): void; equal(a: unknown, b: unknown): void }) {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const hw = (...args: string[]) => runHeadwayOn(s, args);
  t.equal((await hw('users', 'create', 'alice')).code, 0);
  const node = await hw('debug', 'create-node', '--user', 'alice', '--name', 'box', '-o', 'json');
  return { s, hw, id: String(JSON.parse(node.stdout).id) };
}

t.test('a user named twice (-i and -n) is refused, not the first one acted on', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const hw = (...args: string[]) => runHeadwayOn(s, args);
  t.equal((await hw('users', 'create', 'victim')).code, 0);
  t.equal((await hw('users', 'create', 'keepme')).code, 0);
  const victim = String(s.state.users.byName('victim')!.id);
  for (const args of [
    ['users', 'destroy', '-i', victim, '-n', 'keepme', '--force'],
    ['users', 'rename', '-i', victim, '-n', 'keepme', '-r', 'renamed'],
    ['users', 'link', '-i', victim, '-n', 'keepme', '-s', 'sub', '--issuer', 'https://idp.example.com'],
  ]) {
    const r = await hw(...args);
    t.equal(r.code, 2, args.join(' '));
    t.match(r.stderr, /pass only one of --identifier or --name/);
  }
  t.same(s.state.users.list().map((u) => u.name).sort(), ['keepme', 'victim'], 'both users as they were');
  const none = await hw('users', 'destroy', '--force');
  t.equal(none.code, 2);
  t.match(none.stderr, /pass --identifier or --name/);
});

t.test('impossible or too distant expiry times name the flag and change nothing', async (t) => {
  const { s, hw, id } = await withNode(t);
  const before = s.state.nodes.get(Number(id))!.expiry;
  for (const expiry of ['2030-02-31T10:00:00Z', '2030-02-29T10:00:00Z', '2030-01-01T24:00:00Z', '2030-01-01T10:00:00+25:00', '999999999999h']) {
    const r = await hw('nodes', 'expire', '-i', id, '--expiry', expiry);
    t.equal(r.code, 2, expiry);
    t.match(r.stderr, /--expiry: /, expiry);
  }
  t.same(s.state.nodes.get(Number(id))!.expiry, before, 'expiry unchanged');
  const leap = await hw('nodes', 'expire', '-i', id, '--expiry', '2032-02-29T10:00:00Z');
  t.equal(leap.code, 0, leap.stderr);
  for (const args of [['preauthkeys', 'create', '-u', 'alice', '-e', '999999999999h'], ['apikeys', 'create', '-e', '999999999999h']]) {
    const r = await hw(...args);
    t.equal(r.code, 2, args.join(' '));
    t.match(r.stderr, /--expiration: the duration reaches past 9999-12-31/);
  }
  t.same(await s.state.keys.listPreAuthKeys(), [], 'no pre-auth key made');
});

t.test('an empty new name, a grant named twice and an unreadable config are usage errors naming them', async (t) => {
  const { s, hw, id } = await withNode(t);
  const emptyNode = await hw('nodes', 'rename', '-i', id, '');
  t.equal(emptyNode.code, 2);
  t.match(emptyNode.stderr, /NEW_NAME: give the new name/);
  const emptyUser = await hw('users', 'rename', '-n', 'alice', '-r', ' ');
  t.equal(emptyUser.code, 2);
  t.match(emptyUser.stderr, /--new-name: give the new name/);
  t.ok(s.state.users.byName('alice'), 'user name kept');
  const twice = await hw('drive', 'revoke', '--force', '1', '-i', '2');
  t.equal(twice.code, 2);
  t.match(twice.stderr, /pass the grant id once/);
  const dir = mkdtempSync(join(tmpdir(), 'headway-cfgdir-'));
  const cfg = await runHeadwayOn(s, ['users', 'list', '-c', dir]);
  t.equal(cfg.code, 1);
  t.match(cfg.stderr, new RegExp(`cannot read config file ${dir}: EISDIR`));
});
