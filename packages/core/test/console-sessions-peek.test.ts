/**
 * ConsoleSessions.peek answers the session as check does but never moves its idle deadline: a long-lived event
 * stream asking "still signed in?" must not keep an unattended console signed in.
 */
import t from 'tap';
import { ConsoleSessions } from '../src/console/sessions.js';

t.test('peek does not move the idle deadline; check does', async (t) => {
  let now = Date.parse('2030-01-01T00:00:00Z');
  const sessions = new ConsoleSessions(undefined, { linkLifetimeMs: 60_000, idleMs: 100_000, maxAgeMs: 3_600_000 }, () => new Date(now));
  const peeked = await sessions.open('alice', 'link');
  const checked = await sessions.open('bob', 'link');
  now += 70_000;
  t.equal((await sessions.peek(peeked.cookie))?.admin, 'alice', 'peek sees a live session');
  t.equal((await sessions.check(checked.cookie))?.admin, 'bob');
  now += 40_000;
  t.equal(await sessions.peek(peeked.cookie), undefined, 'idle since sign-in: over, for all the peeks');
  t.equal((await sessions.peek(checked.cookie))?.admin, 'bob', 'used 40 s ago: still on');
  t.equal(await sessions.peek(undefined), undefined);
  t.equal(await sessions.peek('x'.repeat(101)), undefined, 'an overlong cookie is no session');
});
