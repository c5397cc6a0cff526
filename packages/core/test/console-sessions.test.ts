// ConsoleSessions with an injected clock: links work once and only in time; sessions end when idle or too old;
// the last-use write is throttled; prune removes exactly what is over.
import t from 'tap';
import { ConsoleSessions, MemoryConsoleSessions } from '../src/index.js';
import type { ConsoleSessionRow } from '../src/ports/index.js';

const MIN = 60_000;
const limits = { linkLifetimeMs: 10 * MIN, idleMs: 30 * MIN, maxAgeMs: 120 * MIN };

/** CountingRepo records every touch, so the throttle can be seen. */
class CountingRepo extends MemoryConsoleSessions {
  touches: Date[] = [];
  override touch(id: string, at: Date): Promise<void> {
    this.touches.push(at);
    return super.touch(id, at);
  }
}

function rig() {
  let now = Date.UTC(2026, 10, 29, 12, 0, 0);
  const repo = new CountingRepo();
  const sessions = new ConsoleSessions(repo, limits, () => new Date(now));
  return { repo, sessions, advance: (ms: number) => { now += ms; }, at: () => now };
}

t.test('a link signs in once', async (t) => {
  const { sessions } = rig();
  const link = await sessions.createLink('alice');
  t.match(link.token, /^[A-Za-z0-9_-]{43}$/, '256 random bits, base64url');
  const opened = await sessions.redeemLink(link.token);
  t.equal(opened?.session.admin, 'alice');
  t.equal(opened?.session.via, 'link');
  t.equal(await sessions.redeemLink(link.token), undefined, 'the second use is refused');
  t.equal(await sessions.redeemLink(''), undefined, 'an empty token is refused');
  t.equal(await sessions.redeemLink('x'.repeat(500)), undefined, 'an over-long token is refused');
  t.equal(await sessions.redeemLink('not-a-token'), undefined, 'an unknown token is refused');
});

t.test('a link expires at its lifetime', async (t) => {
  const { sessions, advance } = rig();
  const early = await sessions.createLink('bob');
  const late = await sessions.createLink('bob');
  advance(limits.linkLifetimeMs - 1);
  t.ok(await sessions.redeemLink(early.token), 'one millisecond before expiry it works');
  advance(1);
  t.equal(await sessions.redeemLink(late.token), undefined, 'at expiry it is refused');
});

t.test('a session ends when idle for idleMs', async (t) => {
  const { sessions, advance } = rig();
  const { cookie } = await sessions.open('carol@example.com', 'oidc');
  advance(limits.idleMs - 1);
  const live = await sessions.check(cookie);
  t.equal(live?.admin, 'carol@example.com', 'just inside the idle limit it is live');
  t.equal(live?.via, 'oidc');
  advance(limits.idleMs - 1);
  t.ok(await sessions.check(cookie), 'each use moves the idle deadline');
  advance(limits.idleMs);
  t.equal(await sessions.check(cookie), undefined, 'idle for idleMs: over');
  t.equal(await sessions.check(cookie), undefined, 'and stays over');
});

t.test('a session ends maxAgeMs after sign-in however busy', async (t) => {
  const { sessions, advance } = rig();
  const { cookie, session } = await sessions.open('dave', 'link');
  t.equal(session.expiresAt.getTime() - session.createdAt.getTime(), limits.idleMs, 'a new session ends first by idleness');
  let last;
  for (let used = 0; used + 10 * MIN < limits.maxAgeMs; used += 10 * MIN) {
    advance(10 * MIN);
    last = await sessions.check(cookie);
    t.ok(last, `used at +${(used + 10 * MIN) / MIN} minutes: live`);
  }
  t.equal(last?.expiresAt.getTime(), session.createdAt.getTime() + limits.maxAgeMs, 'near the end the absolute limit is the deadline');
  advance(10 * MIN);
  t.equal(await sessions.check(cookie), undefined, 'at maxAgeMs: over');
});

t.test('the last use is written at most once a minute', async (t) => {
  const { sessions, repo, advance } = rig();
  const { cookie } = await sessions.open('erin', 'link');
  for (let i = 0; i < 5; i++) { advance(10_000); await sessions.check(cookie); }
  t.equal(repo.touches.length, 0, 'five uses within 50s: no write');
  advance(10_000);
  await sessions.check(cookie);
  t.equal(repo.touches.length, 1, 'the use at 60s writes');
  await sessions.check(cookie);
  t.equal(repo.touches.length, 1, 'and the next one right after does not');
});

t.test('close ends a session; a wrong or missing cookie finds none', async (t) => {
  const { sessions } = rig();
  const { cookie } = await sessions.open('frank', 'link');
  t.equal(await sessions.check(undefined), undefined);
  t.equal(await sessions.check('y'.repeat(200)), undefined);
  t.equal(await sessions.close(cookie), true);
  t.equal(await sessions.check(cookie), undefined);
  t.equal(await sessions.close(cookie), false);
});

t.test('csrfMatches: only the session\'s own token', async (t) => {
  const { sessions } = rig();
  const { session } = await sessions.open('gina', 'link');
  t.ok(ConsoleSessions.csrfMatches(session, session.csrf));
  t.notOk(ConsoleSessions.csrfMatches(session, undefined));
  t.notOk(ConsoleSessions.csrfMatches(session, ''));
  t.notOk(ConsoleSessions.csrfMatches(session, `${session.csrf.slice(0, -1)}A` === session.csrf ? `${session.csrf.slice(0, -1)}B` : `${session.csrf.slice(0, -1)}A`));
});

t.test('prune counts and removes what is over, keeps the rest', async (t) => {
  const { sessions, repo, advance } = rig();
  const idle = await sessions.open('idle', 'link');
  const busy = await sessions.open('busy', 'link');
  await sessions.createLink('spent').then((l) => sessions.redeemLink(l.token));
  const stale = await sessions.createLink('stale');
  advance(11 * MIN);
  const fresh = await sessions.createLink('fresh');
  t.equal(await sessions.prune(), 2, 'two links expired (one spent, one not); no session is over yet');
  await sessions.check(busy.cookie);
  advance(20 * MIN);
  t.equal(await sessions.prune(), 3, 'the two idle sessions (one opened by the spent link) and the fresh link (expired at +21m) go');
  t.equal(await sessions.check(idle.cookie), undefined);
  t.ok(await sessions.check(busy.cookie), 'the used session stays');
  t.equal(await sessions.redeemLink(stale.token), undefined);
  t.equal(await sessions.redeemLink(fresh.token), undefined);
  t.equal(repo.touches.length, 2);
});

t.test('start prunes on its timer only where mayRun says so', async (t) => {
  const { sessions, advance } = rig();
  await sessions.open('gone', 'link');
  advance(limits.maxAgeMs);
  const ticks: Array<() => Promise<void>> = [];
  const pruned: number[] = [];
  let may = false;
  sessions.start(() => may, { every: (fn) => { ticks.push(fn); return () => undefined; }, pruned: (n) => pruned.push(n) });
  t.equal(ticks.length, 1, 'one timer');
  await ticks[0]!();
  t.same(pruned, [], 'an instance that does not run jobs prunes nothing');
  may = true;
  await ticks[0]!();
  t.same(pruned, [1], 'the one that does prunes');
  sessions.stop();
});
