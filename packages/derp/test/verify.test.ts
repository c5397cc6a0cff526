import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { formatNodeKey, generateDerpKeyPair, parseNodeKey, publicKeyFromPrivate } from '../src/keys.js';
import { parseAdmitRequest, verifyHandler, MAX_VERIFY_BODY_BYTES } from '../src/verify.js';
import type { DerpClientInfo } from '../src/server.js';

t.test('keys: nodekey formatting and parsing', async (t) => {
  const kp = generateDerpKeyPair();
  t.same(publicKeyFromPrivate(kp.privateKey), kp.publicKey);
  const text = formatNodeKey(kp.publicKey);
  t.match(text, /^nodekey:[0-9a-f]{64}$/);
  t.same(parseNodeKey(text), kp.publicKey);
  t.throws(() => parseNodeKey('mkey:' + '0'.repeat(64)), /expected "nodekey:<64 hex chars>", got prefix "mkey:"/);
  t.throws(() => parseNodeKey('nodekey:abc'), /expected 64 hex chars after "nodekey:", got 3 chars/);
  t.throws(() => formatNodeKey(Buffer.alloc(31)), /32 raw bytes/);
  // RFC 7748 §6.1 Alice: private → public.
  const alice = Buffer.from('77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a', 'hex');
  t.equal(publicKeyFromPrivate(alice).toString('hex'), '8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a');
});

t.test('parseAdmitRequest validates fields and ignores unknown ones', async (t) => {
  const key = formatNodeKey(generateDerpKeyPair().publicKey);
  t.same(parseAdmitRequest(JSON.stringify({ NodePublic: key, Source: '100.64.0.1', DiscoPublic: 'discokey:00' })), { NodePublic: key, Source: '100.64.0.1' });
  t.same(parseAdmitRequest(JSON.stringify({ NodePublic: key, Source: '' })), { NodePublic: key });
  t.throws(() => parseAdmitRequest('{'), /must be JSON/);
  t.throws(() => parseAdmitRequest('[]'), /JSON object/);
  t.throws(() => parseAdmitRequest('{}'), /NodePublic must be a string/);
  t.throws(() => parseAdmitRequest(JSON.stringify({ NodePublic: 'nodekey:zz' })), /NodePublic: .*expected 64 hex chars/);
  t.throws(() => parseAdmitRequest(JSON.stringify({ NodePublic: key, Source: 'not-an-ip' })), /Source must be an IP/);
});

t.test('POST /verify answers {"Allow": bool} with the shared predicate', async (t) => {
  const known = generateDerpKeyPair();
  const calls: { key: string; info: DerpClientInfo }[] = [];
  const handler = verifyHandler(async (key, info) => {
    calls.push({ key, info });
    if (key.endsWith('ff')) throw new Error('store down');
    return key === formatNodeKey(known.publicKey);
  });
  const server = createServer((req, res) => void handler(req, res));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/verify`;
  const post = (body: string): Promise<Response> => fetch(url, { method: 'POST', body, headers: { 'Content-Type': 'application/json' } });

  const allowed = await post(JSON.stringify({ NodePublic: formatNodeKey(known.publicKey), Source: '203.0.113.9' }));
  t.equal(allowed.status, 200);
  t.equal(allowed.headers.get('content-type'), 'application/json');
  t.same(await allowed.json(), { Allow: true });
  t.same(calls[0], { key: formatNodeKey(known.publicKey), info: { transport: 'verify', remoteAddress: '203.0.113.9' } });

  const stranger = await post(JSON.stringify({ NodePublic: formatNodeKey(generateDerpKeyPair().publicKey) }));
  t.same(await stranger.json(), { Allow: false });

  const bad = await post('{"NodePublic": 5}');
  t.equal(bad.status, 400);
  t.match(((await bad.json()) as { error: string }).error, /NodePublic/);
  t.equal((await post('x'.repeat(MAX_VERIFY_BODY_BYTES + 1))).status, 413);
  const get = await fetch(url);
  t.equal(get.status, 405);
  t.equal(get.headers.get('allow'), 'POST');
  const failing = await post(JSON.stringify({ NodePublic: 'nodekey:' + 'f'.repeat(64) }));
  t.equal(failing.status, 500, 'a failing predicate is a server error, not an allow');
  t.same(await failing.json(), { error: 'admission check failed' });
  t.equal(calls.length, 3, 'invalid requests never reach the predicate');
  t.same(parseNodeKey(calls[1]!.key).length, 32);
});
