// SSH check mode on a real server without devices: a check is opened as the destination device's question would
// open it, then its page, `auth approve|reject` over the REST API and the CLI, and their refusals of bad input.
import t from 'tap';
import { nodeInput } from '@headway/test-support';
import { runHeadwayOn } from '../src/cli.js';
import { adminFetch, startTestServer } from '../src/server.js';

const POLICY = { ssh: [{ action: 'check', src: ['alice@'], dst: ['alice@'], users: ['root'] }] };

t.test('an SSH check through the page, the API and the CLI', async (t) => {
  const s = await startTestServer({ policy: { mode: 'database' } });
  t.teardown(() => s.stop());
  const alice = await s.state.users.create({ name: 'alice' });
  const laptop = await s.state.nodes.create(nodeInput('laptop', alice.id));
  const server = await s.state.nodes.create(nodeInput('server', alice.id));
  await s.policy.set(JSON.stringify(POLICY));
  const key = (await s.state.keys.createApiKey(null)).secret;
  const ask = (authId?: string) => s.sshChecks.action(`/machine/ssh/action/${laptop.id}/to/${server.id}?local_user=root${authId ? `&auth_id=${authId}` : ''}`,
    server.machineKey, new AbortController().signal);
  const open = async (): Promise<string> => {
    const a = await ask();
    const id = a && 'action' in a ? new URL(a.action.holdAndDelegate ?? 'x:').searchParams.get('auth_id') : null;
    if (!id) throw new Error(`no check: ${JSON.stringify(a)}`);
    return id;
  };

  const id = await open();
  const page = await fetch(`${s.urls.http}/auth/${id}`);
  t.equal(page.status, 200);
  t.match(page.headers.get('content-security-policy'), /default-src 'none'/, 'served with the pages\' CSP');
  t.match(await page.text(), `headway auth approve --auth-id ${id}`);
  t.equal((await fetch(`${s.urls.http}/auth/sshcheck-${'A'.repeat(32)}`)).status, 404, 'an unknown check: 404');
  t.equal((await fetch(`${s.urls.http}/auth/not%20an%20id`)).status, 400, 'a malformed ID: 400');

  const register = await adminFetch(s, key, 'POST', '/api/v1/auth/register', { authId: id, user: 'alice' });
  t.equal(register.status, 400, 'auth register refuses a check ID');
  t.match(JSON.stringify(register.json), /is the ID of an SSH check, not of a device login/);
  t.equal((await adminFetch(s, key, 'POST', '/api/v1/auth/approve', { authId: `sshcheck-${'A'.repeat(32)}` })).status, 404, 'approving an unknown check: 404');
  t.ok(s.sshChecks.get(id) && !s.sshChecks.get(id)!.verdict, 'the check still waits, unanswered');

  const approved = await adminFetch(s, key, 'POST', '/api/v1/auth/approve', { authId: id });
  t.equal(approved.status, 200);
  t.same(approved.json, {}, 'approving a check answers without a node');
  const twice = await adminFetch(s, key, 'POST', '/api/v1/auth/approve', { authId: id });
  t.equal(twice.status, 409, 'a second approval conflicts');
  const answer = await ask(id);
  t.same(answer && 'action' in answer ? answer.action.accept : undefined, true, 'the held follow-up is accepted');

  // checkPeriod (12h by default) lets the next connection in at once; a new check for another pair needs the CLI.
  const next = await ask();
  t.same(next && 'action' in next ? next.action.accept : undefined, true, 'no second prompt within checkPeriod');
  const other = await s.state.nodes.create(nodeInput('desk', alice.id));
  const a2 = await s.sshChecks.action(`/machine/ssh/action/${other.id}/to/${server.id}?local_user=root`, server.machineKey, new AbortController().signal);
  const id2 = a2 && 'action' in a2 ? new URL(a2.action.holdAndDelegate ?? 'x:').searchParams.get('auth_id')! : '';
  t.match(id2, /^sshcheck-/, 'another source device is checked anew');
  const rejected = await runHeadwayOn(s, ['auth', 'reject', '--auth-id', id2]);
  t.equal(rejected.code, 0, rejected.stderr);
  const a3 = await s.sshChecks.action(`/machine/ssh/action/${other.id}/to/${server.id}?local_user=root&auth_id=${id2}`, server.machineKey, new AbortController().signal);
  t.same(a3 && 'action' in a3 ? a3.action.reject : undefined, true, 'the rejected check refuses its connection');
  t.notOk(s.logs.join('\n').includes(id2), 'check IDs are not logged');
});
