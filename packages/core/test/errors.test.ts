import Koa from 'koa';
import t from 'tap';
import { problemMiddleware } from '../src/api/http.js';
import { safeErrorText } from '../src/errors.js';
import type { Logger } from '../src/log.js';

// A driver error's message holds the SQL with its bound values (client Hostinfo, names, hashes).
const driverError = () => Object.assign(new Error('insert into "nodes" ("hostinfo") values (\'{"Hostname":"leak-me"}\') - UNIQUE constraint failed'), { code: 'SQLITE_CONSTRAINT_UNIQUE' });

t.test('safeErrorText names a driver error by its code, never its SQL text', async (t) => {
  const text = safeErrorText(driverError());
  t.match(text, /SQLITE_CONSTRAINT_UNIQUE/);
  t.notMatch(text, /leak-me|insert into/);
  t.equal(safeErrorText(new Error('plain failure')), 'plain failure');
  t.equal(safeErrorText('thrown string'), 'non-Error thrown');
});

t.test('REST 500s log no SQL text (regression: the API logged err.message of database errors)', async (t) => {
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
