import Koa from 'koa';
import t, { type Test } from 'tap';
import { HeadwayError } from '@headway/core';
import type { Logger } from '@headway/core';
import { corsMiddleware, problemMiddleware, readJson } from '../src/index.js';

const logger = { error: () => undefined } as unknown as Logger;

/** serve runs a koa app on loopback for one test. */
async function serve(t: Test, app: Koa): Promise<string> {
  const server = app.listen(0, '127.0.0.1');
  t.teardown(() => server.close());
  await new Promise((r) => server.once('listening', r));
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}

t.test('readJson takes JSON under any content type and names what is wrong with the rest', async (t) => {
  const app = new Koa();
  app.use(problemMiddleware(logger));
  app.use(async (ctx) => { ctx.body = { got: await readJson(ctx, 64) }; });
  const url = await serve(t, app);
  const send = async (body: string, type?: string) => {
    const res = await fetch(url, { method: 'POST', body, headers: type ? { 'content-type': type } : {} });
    return { status: res.status, body: (await res.json()) as Record<string, any> };
  };
  for (const type of ['text/plain;charset=UTF-8', 'application/json', 'application/octet-stream', 'text/html']) {
    t.same(await send('{"display_name":"A"}', type), { status: 200, body: { got: { displayName: 'A' } } }, type);
  }
  t.same((await send('')).body, { got: {} }, 'an empty body is {}');
  const broken = await send('{"a":tru}', 'text/plain');
  t.equal(broken.status, 400);
  t.match(broken.body.detail, /^body is not JSON: Unexpected token/);
  t.equal(broken.body.message, broken.body.detail);
  t.equal((await send('[]')).body.detail, 'body must be a JSON object, found a list');
  t.equal((await send('true')).body.detail, 'body must be a JSON object, found a boolean');
  const big = await send(JSON.stringify({ a: 'x'.repeat(100) }), 'text/plain');
  t.equal(big.status, 413, 'the size limit stays');
  t.equal(big.body.message, big.body.detail);
});

t.test('every problem has message equal to detail, 429 and unexpected 500s included', async (t) => {
  const app = new Koa();
  app.use(problemMiddleware(logger));
  app.use((ctx) => {
    if (ctx.path === '/429') throw new HeadwayError('rate_limited', 'too many logins waiting for approval');
    if (ctx.path === '/403') throw new HeadwayError('forbidden', 'not yours');
    if (ctx.path === '/koa') ctx.throw(405, 'koa says no');
    throw new Error('boom');
  });
  const url = await serve(t, app);
  for (const [path, status, detail] of [['/429', 429, 'too many logins waiting for approval'], ['/403', 403, 'not yours'], ['/koa', 405, 'koa says no'], ['/500', 500, 'internal error; see the server log']] as const) {
    const res = await fetch(url + path);
    t.equal(res.status, status, path);
    const body = (await res.json()) as Record<string, unknown>;
    t.equal(body.detail, detail);
    t.equal(body.message, detail, `${path}: message`);
  }
});

t.test('corsMiddleware: only listed origins, only under the prefix, preflights answered before anything else', async (t) => {
  const app = new Koa();
  app.use(corsMiddleware(['https://ui.example.com']));
  app.use((ctx) => { ctx.status = 401; ctx.body = 'reached'; });
  const url = await serve(t, app);
  const pre = await fetch(url + '/api/v1/node/1', { method: 'OPTIONS', headers: { origin: 'https://ui.example.com', 'access-control-request-method': 'DELETE' } });
  t.equal(pre.status, 204, 'a listed preflight never reaches auth');
  t.equal(pre.headers.get('access-control-allow-origin'), 'https://ui.example.com');
  t.equal(pre.headers.get('access-control-max-age'), '600');
  const near = await fetch(url + '/api/v1/node/1', { method: 'OPTIONS', headers: { origin: 'https://ui.example.com.evil.test', 'access-control-request-method': 'GET' } });
  t.equal(near.status, 401, 'an origin that only starts like a listed one goes on to auth');
  t.equal(near.headers.get('access-control-allow-origin'), null);
  const scheme = await fetch(url + '/api/v1/node', { headers: { origin: 'http://ui.example.com' } });
  t.equal(scheme.headers.get('access-control-allow-origin'), null, 'another scheme is another origin');
  const outside = await fetch(url + '/register/x', { method: 'OPTIONS', headers: { origin: 'https://ui.example.com', 'access-control-request-method': 'GET' } });
  t.equal(outside.headers.get('access-control-allow-origin'), null, 'outside /api/ nothing changes');
  t.equal(outside.headers.get('vary'), null);
});
