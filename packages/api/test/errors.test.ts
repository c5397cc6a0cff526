import Koa from 'koa';
import t from 'tap';
import { problemMiddleware } from '../src/http.js';
import { jsonPreview, safeErrorText, shown } from '@headway/core';
import type { Logger } from '@headway/core';

// A driver error's message holds the SQL with its bound values (client Hostinfo, names, hashes).
const driverError = () => Object.assign(new Error('insert into "nodes" ("hostinfo") values (\'{"Hostname":"leak-me"}\') - UNIQUE constraint failed'), { code: 'SQLITE_CONSTRAINT_UNIQUE' });

t.test('safeErrorText names a driver error by its code, never its SQL text', async (t) => {
  const text = safeErrorText(driverError());
  t.match(text, /SQLITE_CONSTRAINT_UNIQUE/);
  t.notMatch(text, /leak-me|insert into/);
  t.equal(safeErrorText(new Error('plain failure')), 'plain failure');
  t.equal(safeErrorText('thrown string'), 'non-Error thrown');
});

t.test('REST 500s log no SQL text: a database error is logged without its message', async (t) => {
  const lines: string[] = [];
  const logger = { error: (msg: string, fields?: Record<string, unknown>) => lines.push(msg + ' ' + JSON.stringify(fields)) } as unknown as Logger;
  const app = new Koa();
  app.use(problemMiddleware(logger));
  app.use(() => { throw driverError(); });
  const server = app.listen(0, '127.0.0.1');
  t.teardown(() => server.close());
  await new Promise((r) => server.once('listening', r));
  const { port } = server.address() as { port: number };
  const res = await fetch(`http://127.0.0.1:${port}/api/v1/node`);
  t.equal(res.status, 500);
  t.notMatch(await res.text(), /leak-me|insert into/, 'the body says nothing of the SQL');
  t.equal(lines.length, 1);
  t.match(lines[0], /SQLITE_CONSTRAINT_UNIQUE/);
  t.notMatch(lines[0], /leak-me|insert into/, 'the log line names the code only');
});

/** nested is a list `levels` deep around `inner`, built without recursion. */
function nested(levels: number, inner: unknown = 'x'): unknown {
  let v = inner;
  for (let i = 0; i < levels; i++) v = [v];
  return v;
}

t.test('shown quoting a list nested 5,000 deep overflowed the stack (JSON.stringify); any value is shown within max characters', async (t) => {
  for (const levels of [5_000, 100_000, 1_000_000]) {
    const text = shown(nested(levels));
    t.equal(text, `${JSON.stringify('['.repeat(80))}... (more than 80 characters)`, `${levels} levels: the first 80 characters`);
  }
  const deepObject = JSON.parse(`${'{"a":'.repeat(100_000)}1${'}'.repeat(100_000)}`) as unknown;
  t.match(shown(deepObject), /^"\{\\"a\\":/, 'an object nested 100,000 deep');
  const cycle: Record<string, unknown> = { name: 'loop' };
  cycle.self = cycle;
  t.match(shown(cycle), /^"\{\\"name\\":\\"loop\\",\\"self\\":\{/, 'a cycle is cut, not an error');
  const wide = Array.from({ length: 1_000_000 }, (_, i) => i);
  t.equal(shown(wide, 10), `${JSON.stringify('[0,1,2,3,4')}... (more than 10 characters)`, 'a million-element list');
  t.equal(jsonPreview(nested(1_000_000), 5).length, 5, 'the preview stops at its limit');
});

t.test('shown writes what JSON.stringify writes for values that fit', async (t) => {
  const values: unknown[] = [
    null, true, false, 0, -1.5, 1e21, Number.NaN, Infinity, 'ro', '', 'quote " and \\ and é', [], {}, [1, 'two', null, [3]],
    { a: 1, b: [true, { c: 'd' }], skip: undefined, fn: () => 1 }, [undefined, () => 1], new Date('2030-01-02T03:04:05.006Z'),
    { toJSON: () => 'custom' }, Object.assign(Object.create({ inherited: 1 }) as object, { own: 2 }),
  ];
  for (const v of values) {
    const json = typeof v === 'string' ? v : String(JSON.stringify(v));
    t.equal(shown(v, 200), JSON.stringify(json), json);
  }
  t.equal(shown(undefined), '"undefined"');
  t.equal(shown(10n), '"10"', 'a bigint (JSON.stringify throws on one)');
  t.equal(shown('x'.repeat(100)), `${JSON.stringify('x'.repeat(80))}... (100 characters)`, 'a long string says its length');
});
