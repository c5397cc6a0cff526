/**
 * The same requests to the real headscale 0.29.2 and to Headway, as tools built for headscale make them:
 * Headway answers alike, or with the documented safer difference (409 where headscale answers 500 for a taken
 * name, 401 for /v1/metrics where headscale has no such path, a redirect from /swagger to its own page). With a
 * real Tailscale client, a node joined with a pre-auth key shows that key in the REST node list on both.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { HEADSCALE_ALIASES } from '@headway/core';
import { HeadscaleServer, requireHeadscale } from '../src/headscale-server.js';
import { startTestServer } from '../src/server.js';
import { cleanupStack, requireTailscale, TailscaleDevice } from '../src/tailscale.js';

t.setTimeout(300_000);
const JOIN_TIMEOUT_MS = 45_000;
const bin = requireHeadscale(t);

interface Answer { status: number; type: string; body: any; text: string }

/** call sends one request and reads the answer as JSON when it is JSON. */
async function call(base: string, key: string | undefined, method: string, path: string, body?: string, type?: string): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (key) headers.authorization = `Bearer ${key}`;
  if (type) headers['content-type'] = type;
  const res = await fetch(base + path, { method, headers, body, redirect: 'follow' });
  const text = await res.text();
  let parsed: unknown;
  try { parsed = JSON.parse(text); } catch { parsed = undefined; }
  return { status: res.status, type: res.headers.get('content-type') ?? '', body: parsed, text };
}

/** typeLines maps each metric name to its `# TYPE` in an exposition text. */
const typeLines = (text: string) => new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!]));

/** startBoth runs headscale and Headway side by side, each with an API key, stopped when the test ends. */
async function startBoth(t: Test, headscale: string) {
  const cleanups = cleanupStack(t);
  const dir = mkdtempSync(join(tmpdir(), 'hw-compare-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const hs = await HeadscaleServer.start(headscale, dir);
  cleanups.push(() => hs.stop());
  const hw = await startTestServer();
  cleanups.push(() => hw.stop());
  const hsKey = (await hs.cli(['apikeys', 'create'])).trim().split('\n').pop()!;
  const hwKey = (await hw.state.keys.createApiKey(null)).secret;
  return { hs, hw, hsKey, hwKey, cleanups };
}

if (bin) {
  t.test('headscale 0.29.2 and Headway answer the same requests alike', async (t) => {
    const { hs, hw, hsKey, hwKey, cleanups } = await startBoth(t, bin);
    const both = async (method: string, path: string, body?: string, type?: string, keyed = true) => ({
      hs: await call(hs.url, keyed ? hsKey : undefined, method, path, body, type),
      hw: await call(hw.urls.http, keyed ? hwKey : undefined, method, path, body, type),
    });

    // A browser's string body (text/plain;charset=UTF-8) and curl's default type are read as JSON by both.
    for (const [name, type] of [['alice', 'text/plain;charset=UTF-8'], ['bob', 'application/x-www-form-urlencoded'], ['carol', undefined]] as const) {
      const r = await both('POST', '/api/v1/user', JSON.stringify({ name }), type);
      t.equal(r.hs.status, 200, `headscale: ${type ?? 'no type'}`);
      t.equal(r.hw.status, 200, `Headway: ${type ?? 'no type'}`);
      t.equal(r.hw.body.user.name, r.hs.body.user.name);
    }

    // Errors: both carry a message; the status is the same, or Headway's is the more precise one.
    const errors: Array<[string, string, string, string | undefined, number, number]> = [
      ['not JSON', 'POST', '/api/v1/user', '{"na', 400, 400],
      ['a list', 'POST', '/api/v1/user', '[1]', 400, 400],
      ['unknown node', 'GET', '/api/v1/node/99', undefined, 404, 404],
      ['unknown route', 'GET', '/api/v1/nothing', undefined, 404, 404],
      // headscale answers a taken name with its database's constraint error (500); Headway with 409.
      ['taken name', 'POST', '/api/v1/user/1/rename/bob', undefined, 500, 409],
    ];
    for (const [what, method, path, body, hsStatus, hwStatus] of errors) {
      const r = await both(method, path, body, body ? 'text/plain' : undefined);
      t.equal(r.hs.status, hsStatus, `headscale: ${what}`);
      t.equal(r.hw.status, hwStatus, `Headway: ${what}`);
      t.equal(typeof r.hs.body?.message, 'string', `headscale: ${what} has a message`);
      t.equal(typeof r.hw.body?.message, 'string', `Headway: ${what} has a message`);
      t.ok(r.hw.body.message.length > 0, `Headway: ${what}: ${r.hw.body.message}`);
    }
    t.same((await call(hw.urls.http, hwKey, 'GET', '/api/v1/user')).body.users.map((u: { name: string }) => u.name).sort(), ['alice', 'bob', 'carol'], 'the refused calls changed nothing on Headway');

    // /swagger: headscale serves its page there; Headway sends the browser on to its own.
    const swagger = await both('GET', '/swagger', undefined, undefined, false);
    t.equal(swagger.hs.status, 200);
    t.equal(swagger.hw.status, 200, 'after the redirect');
    for (const a of [swagger.hs, swagger.hw]) t.match(a.type, /^text\/html/);

    // /v1/metrics: headscale has no such path (404); Headway asks for a key (401) and, given one, answers.
    const metrics = await both('GET', '/v1/metrics', undefined, undefined, false);
    t.equal(metrics.hs.status, 404, 'headscale publishes nothing on its main port');
    t.equal(metrics.hw.status, 401, 'Headway publishes counts on the main port to key holders only');
    t.equal((await call(hw.urls.http, hwKey, 'GET', '/v1/metrics')).status, 200);

    // headscale's metric names on the metrics listeners: what headscale publishes, Headway publishes with the same type.
    const hsTypes = typeLines(await (await fetch(`${hs.metricsUrl}/metrics`)).text());
    const hwTypes = typeLines(await (await fetch(`${hw.urls.metrics}/metrics`)).text());
    let compared = 0;
    for (const alias of HEADSCALE_ALIASES) {
      const hsType = hsTypes.get(alias.name);
      if (!hsType) continue;
      t.equal(hwTypes.get(alias.name), hsType, `${alias.name}: ${hsType} on both`);
      compared++;
    }
    t.ok(hsTypes.has('headscale_nodestore_nodes') && hsTypes.has('process_cpu_seconds_total'), 'headscale publishes the gauges compared');
    t.ok(compared >= 2, `${compared} names compared`);
  });

  const installed = requireTailscale(t);
  if (installed.length) {
    t.test('a node joined with a pre-auth key shows it in the REST node list of both', async (t) => {
      const { hs, hw, hsKey, hwKey, cleanups } = await startBoth(t, bin);
      const nodes = new Map<string, any>();
      for (const [name, base, key] of [['headscale', hs.url, hsKey], ['Headway', hw.urls.http, hwKey]] as const) {
        const user = await call(base, key, 'POST', '/api/v1/user', JSON.stringify({ name: 'alice' }));
        const pak = await call(base, key, 'POST', '/api/v1/preauthkey', JSON.stringify({ user: user.body.user.id, expiration: new Date(Date.now() + 3_600_000).toISOString() }));
        t.equal(pak.status, 200, `${name}: pre-auth key made`);
        const d = await TailscaleDevice.start({ name: `cmp-${name.toLowerCase()}`, version: installed[0]!.version });
        cleanups.push(() => d.stop());
        await d.up({ loginServer: base, authKey: pak.body.preAuthKey.key, hostname: 'alpha', timeoutMs: JOIN_TIMEOUT_MS });
        const list = await call(base, key, 'GET', '/api/v1/node');
        nodes.set(name, list.body.nodes[0]);
        const one = await call(base, key, 'GET', `/api/v1/node/${list.body.nodes[0].id}`);
        t.same(one.body.node.preAuthKey, list.body.nodes[0].preAuthKey, `${name}: node get carries the same key as the list`);
      }
      const [hsNode, hwNode] = [nodes.get('headscale'), nodes.get('Headway')];
      t.ok(hsNode.preAuthKey, 'headscale lists the key');
      t.ok(hwNode.preAuthKey, 'Headway lists the key');
      t.same(Object.keys(hwNode.preAuthKey).sort(), Object.keys(hsNode.preAuthKey).sort(), 'the same fields');
      for (const f of ['reusable', 'ephemeral', 'used', 'aclTags']) t.same(hwNode.preAuthKey[f], hsNode.preAuthKey[f], f);
      t.equal(hwNode.preAuthKey.user.name, hsNode.preAuthKey.user.name);
      t.match(hsNode.preAuthKey.key, /-\*\*\*$/, 'headscale redacts it');
      t.match(hwNode.preAuthKey.key, /-\*\*\*$/, 'Headway redacts it');

      // With a node connected, headscale publishes its map response counters too: Headway's carry the same type.
      const hsTypes = typeLines(await (await fetch(`${hs.metricsUrl}/metrics`)).text());
      const hwTypes = typeLines(await (await fetch(`${hw.urls.metrics}/metrics`)).text());
      t.ok(hsTypes.has('headscale_mapresponse_generated_total'), 'headscale counts the map responses it made');
      for (const alias of HEADSCALE_ALIASES) {
        if (hsTypes.has(alias.name)) t.equal(hwTypes.get(alias.name), hsTypes.get(alias.name), `${alias.name}: ${hsTypes.get(alias.name)} on both`);
      }
    });
  }
}
