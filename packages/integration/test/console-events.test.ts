/**
 * /admin/events on the real server: 401 without a console session (and with an API key: the stream is the
 * console's); with one, `ready`, then an event for a change made through the API; the audit of who changed it stays
 * the API's. A server stop is not held up by an open stream: close() resolves and the stream has ended.
 */
import t from 'tap';
import { startTestServer } from '../src/index.js';
import { consoleCookie } from '../src/console-machines.js';
import { socketCall } from '../src/console.js';

t.setTimeout(60_000);

/** reader reads a streamed body as text as it arrives; next() waits for a pattern after what was read before. */
function reader(body: ReadableStream<Uint8Array>) {
  const decoder = new TextDecoder();
  const it = body.getReader();
  let text = '';
  let seen = 0;
  let done = false;
  /** arrived settles at the next chunk (or the end); a new one is made each time. */
  let wake = () => undefined as void;
  let arrived = new Promise<void>((r) => { wake = r; });
  const ended = (async () => {
    for (;;) {
      const r = await it.read().catch(() => ({ done: true, value: undefined }));
      if (r.done) done = true;
      else text += decoder.decode(r.value, { stream: true });
      wake();
      arrived = new Promise<void>((r) => { wake = r; });
      if (done) return;
    }
  })();
  const next = async (pattern: RegExp) => {
    for (;;) {
      const m = pattern.exec(text.slice(seen));
      if (m) { seen += m.index + m[0].length; return m[0]; }
      if (done) throw new Error(`the stream ended before ${pattern}: ${JSON.stringify(text)}`);
      await arrived;
    }
  };
  return { next, ended, get done() { return done; } };
}

t.test('the console event stream on the real server', async (t) => {
  const s = await startTestServer();
  let stopped = false;
  t.teardown(() => (stopped ? undefined : s.stop()));
  const url = new URL('/admin/events', s.urls.http);

  const anonymous = await fetch(url);
  t.equal(anonymous.status, 401, 'no session: 401');
  await anonymous.body?.cancel();
  const key = (await s.state.keys.createApiKey(null)).secret;
  const withKey = await fetch(url, { headers: { authorization: `Bearer ${key}` } });
  t.equal(withKey.status, 401, 'an API key is not a console session');
  await withKey.body?.cancel();

  const cookie = await consoleCookie(s, 'alice');
  const res = await fetch(url, { headers: { cookie } });
  t.equal(res.status, 200);
  t.match(res.headers.get('content-type'), /^text\/event-stream/);
  t.equal(res.headers.get('cache-control'), 'no-store');
  const stream = reader(res.body!);
  await stream.next(/event: ready\n/);

  const made = await socketCall(s, 'POST', '/api/v1/user', { name: 'carol' });
  t.equal(made.status, 200);
  t.equal(await stream.next(/event: \w+\ndata: .*\n\n/), 'event: users\ndata: {}\n\n', 'a user made through the API is announced');
  const node = await socketCall(s, 'POST', '/api/v1/debug/node', { user: 'carol', name: 'probe', key: `mkey:${'ab'.repeat(32)}` });
  t.equal(node.status, 200, JSON.stringify(node.json));
  t.equal(await stream.next(/event: nodes\ndata: .*\n\n/), `event: nodes\ndata: {"id":"${node.json.node.id}","change":"added"}\n\n`, 'a new machine is announced by id');

  await s.stop();
  stopped = true;
  await stream.ended;
  t.ok(stream.done, 'the server stopped and the stream ended with it');
});
