// SSH check mode: the /machine/ssh/action answers (SshChecks) over a State on in-memory SQLite, on a clock the
// test moves by hand, and checkPeriodIn over policies compiled by @headway/policy.
import t from 'tap';
import { HeadwayError, silentLogger, type Node } from '@headway/core';
import { compilePolicy, parsePolicy, type SSHAction } from '@headway/policy';
import { checkPeriodIn, SshChecks, type ActionAnswer } from '../src/index.js';
import { nodeInput, startState, type TestState } from '@headway/test-support';
import { FakeClock } from './fake-clock.js';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;

interface Env extends TestState { checks: SshChecks; clock: FakeClock; src: Node; dst: Node; other: Node; tagged: Node; period: { ms: number | undefined } }

async function start(t: Parameters<typeof startState>[0]): Promise<Env> {
  const s = await startState(t, { server_url: 'https://hw.example.com', registration: { pending_expiry: '15m' } });
  const alice = await s.state.users.create({ name: 'alice' });
  const bob = await s.state.users.create({ name: 'bob' });
  const src = await s.state.nodes.create(nodeInput('laptop', alice.id));
  const dst = await s.state.nodes.create(nodeInput('server', alice.id));
  const other = await s.state.nodes.create(nodeInput('bobs', bob.id));
  const tagged = await s.state.nodes.create(nodeInput('ci', null, { tags: ['tag:ci'] }));
  const clock = new FakeClock();
  const period: { ms: number | undefined } = { ms: HOUR };
  const checks = new SshChecks({ state: s.state, config: s.config, logger: silentLogger, clock, checkPeriodOf: () => period.ms });
  t.teardown(() => checks.close());
  return { ...s, checks, clock, src, dst, other, tagged, period };
}

const url = (src: number, dst: number, authId?: string) =>
  `/machine/ssh/action/${src}/to/${dst}?local_user=root${authId ? `&auth_id=${authId}` : ''}`;

function action(a: ActionAnswer | undefined): SSHAction {
  if (!a || a.status !== 200 || !('action' in a)) throw new Error(`expected an SSHAction, got ${JSON.stringify(a)}`);
  return a.action;
}

/** held asks as the destination device and returns the check's auth ID from the HoldAndDelegate URL. */
async function held(env: Env, src: Node = env.src): Promise<{ id: string; a: SSHAction }> {
  const a = action(await env.checks.action(url(src.id, env.dst.id), env.dst.machineKey, new AbortController().signal));
  const id = new URL(a.holdAndDelegate ?? 'x:').searchParams.get('auth_id');
  if (!id) throw new Error(`not held: ${JSON.stringify(a)}`);
  return { id, a };
}

function followUp(env: Env, id: string, signal = new AbortController().signal, src: Node = env.src): Promise<ActionAnswer | undefined> {
  return env.checks.action(url(src.id, env.dst.id, id), env.dst.machineKey, signal);
}

t.test('checkPeriodIn reads the period of the check rule naming the source', async (t) => {
  const nodes = [
    { id: '1', name: 'laptop', userId: '1', tags: [], ipv4: '100.64.0.1', ipv6: 'fd7a:115c:a1e0::1', availableRoutes: [], approvedRoutes: [] },
    { id: '2', name: 'server', userId: '1', tags: [], ipv4: '100.64.0.2', ipv6: 'fd7a:115c:a1e0::2', availableRoutes: [], approvedRoutes: [] },
    { id: '3', name: 'bobs', userId: '2', tags: [], ipv4: '100.64.0.3', availableRoutes: [], approvedRoutes: [] },
  ];
  const snapshot = { users: [{ id: '1', name: 'alice' }, { id: '2', name: 'bob' }], nodes };
  const periodFor = (rule: Record<string, unknown>, src = nodes[0]!) => {
    const policy = parsePolicy(JSON.stringify({ ssh: [{ src: ['alice@'], dst: ['alice@'], users: ['root'], ...rule }] }), { userNames: ['alice', 'bob'] });
    return checkPeriodIn(compilePolicy(policy, snapshot, '2').sshPolicy, { ipv4: src.ipv4, ipv6: src.ipv6 ?? null });
  };
  t.equal(periodFor({ action: 'check' }), 12 * HOUR, 'no checkPeriod: 12h');
  t.equal(periodFor({ action: 'check', checkPeriod: 'always' }), 0, '"always": 0, a prompt each time');
  t.equal(periodFor({ action: 'check', checkPeriod: '1h30m' }), 90 * MINUTE, 'a duration');
  t.equal(periodFor({ action: 'accept' }), undefined, 'an accept rule is no check');
  t.equal(periodFor({ action: 'check' }, nodes[2]!), undefined, 'a source no check rule names');
  const compiled = compilePolicy(parsePolicy('{"ssh":[{"action":"check","src":["alice@"],"dst":["alice@"],"users":["root"],"checkPeriod":"2h"}]}', { userNames: ['alice', 'bob'] }), snapshot, '2');
  t.notMatch(JSON.stringify(compiled.sshPolicy), /checkPeriod|7200/, 'the period is not sent to devices');
});

t.test('a first request is held with the check URL; approval lets the follow-up in, and checkPeriod spares the next prompt', async (t) => {
  const env = await start(t);
  const { id, a } = await held(env);
  t.match(id, /^sshcheck-[A-Za-z0-9_-]{32}$/);
  t.equal(a.holdAndDelegate, `https://hw.example.com/machine/ssh/action/$SRC_NODE_ID/to/$DST_NODE_ID?local_user=$LOCAL_USER&auth_id=${id}`);
  t.match(a.message, `To authenticate, visit: https://hw.example.com/auth/${id}`);
  t.notOk(a.accept || a.reject, 'neither accepted nor rejected yet');
  t.equal(env.checks.get(id)?.localUser, 'root');

  let settled = false;
  const waiting = followUp(env, id).then((x) => { settled = true; return x; });
  await new Promise((r) => setImmediate(r));
  t.equal(settled, false, 'the follow-up is held');
  env.checks.approve(id);
  t.same(action(await waiting), { accept: true, allowAgentForwarding: true, allowLocalPortForwarding: true, allowRemotePortForwarding: true });
  t.equal(env.checks.get(id), undefined, 'an answered check is gone');
  t.throws(() => env.checks.approve(id), { code: 'not_found' }, 'and cannot be approved twice');

  env.clock.advance(HOUR - 1);
  t.same(action(await env.checks.action(url(env.src.id, env.dst.id), env.dst.machineKey, new AbortController().signal)).accept, true, 'within checkPeriod: accepted at once');
  env.clock.advance(1);
  await held(env);
  t.pass('after checkPeriod: held again');
  const again = await followUp(env, id);
  t.ok(action(again).holdAndDelegate, 'the answered ID lets no second connection in: a new check starts');
});

t.test('checkPeriod "always" prompts every time', async (t) => {
  const env = await start(t);
  env.period.ms = 0;
  const { id } = await held(env);
  env.checks.approve(id);
  t.equal(action(await followUp(env, id)).accept, true);
  await held(env);
  t.pass('the next connection is held again');
});

t.test('rejection, expiry and shutdown refuse the held connection with a message', async (t) => {
  const env = await start(t);
  const first = await held(env);
  const waiting = followUp(env, first.id);
  env.checks.reject(first.id);
  const r = action(await waiting);
  t.equal(r.reject, true);
  t.match(r.message, /SSH check refused: an administrator rejected it/);

  const second = await held(env);
  const slow = followUp(env, second.id);
  env.clock.advance(15 * MINUTE - 1);
  t.ok(env.checks.get(second.id), 'still waiting just before registration.pending_expiry');
  env.clock.advance(1);
  const timedOut = action(await slow);
  t.equal(timedOut.reject, true);
  t.match(timedOut.message, /nobody approved it within 15 minutes/);
  t.throws(() => env.checks.approve(second.id), { code: 'not_found' }, 'an expired check cannot be approved');

  const third = await held(env);
  const closing = followUp(env, third.id);
  env.checks.close();
  t.match(action(await closing).message, /shutting down/);
});

t.test('bad requests get 4xx and change nothing', async (t) => {
  const env = await start(t);
  const sig = new AbortController().signal;
  const status = async (u: string, mk = env.dst.machineKey) => (await env.checks.action(u, mk, sig))?.status;
  t.equal(await status('/machine/ssh/action/x/to/2'), 400, 'a node id that is no number');
  t.equal(await status(url(env.src.id, 9999)), 404, 'an unknown destination');
  t.equal(await status(url(env.src.id, env.dst.id), env.src.machineKey), 401, 'asked by another machine than the destination');
  t.equal(await status(url(env.src.id, env.dst.id, 'sshcheck-short')), 400, 'a malformed auth_id');
  const { id } = await held(env);
  t.equal(await status(url(env.other.id, env.dst.id, id)), 401, 'an auth_id of another source');
  t.ok(env.checks.get(id), 'the check still waits');
  env.period.ms = undefined;
  const none = action(await env.checks.action(url(env.src.id, env.dst.id), env.dst.machineKey, sig));
  t.equal(none.reject, true, 'no check rule covers the pair: refused');
  t.match(none.message, /no check rule of the SSH policy covers/);
});

t.test('a device that goes away stops waiting; the check stays for the next follow-up', async (t) => {
  const env = await start(t);
  const { id } = await held(env);
  const abort = new AbortController();
  const gone = followUp(env, id, abort.signal);
  abort.abort();
  t.equal(await gone, undefined, 'nothing to answer');
  env.checks.approve(id);
  t.equal(action(await followUp(env, id)).accept, true, 'the approval reaches the next follow-up');
});

t.test('only the source device\'s owner approves by signing in; a tagged source needs an administrator', async (t) => {
  const env = await start(t);
  const alice = env.state.users.byName('alice')!;
  const bob = env.state.users.byName('bob')!;
  const { id } = await held(env);
  t.throws(() => env.checks.approveAs(id, bob), new HeadwayError('forbidden', 'only alice, the owner of laptop, can approve this SSH connection; you are signed in as bob'));
  t.ok(env.checks.get(id) && !env.checks.get(id)!.verdict, 'refused sign-in changes nothing');
  env.checks.approveAs(id, alice);
  t.equal(action(await followUp(env, id)).accept, true);

  const fromCi = await held(env, env.tagged);
  t.throws(() => env.checks.approveAs(fromCi.id, alice), { code: 'forbidden', message: /tagged and has no owner/ });
  env.checks.approve(fromCi.id);
  t.equal(action(await followUp(env, fromCi.id, undefined, env.tagged)).accept, true, 'an administrator can');
});
