// The RFC 2136 update with TSIG, sent to a real Knot: records appear and go as a query shows, and every
// refusal (wrong secret, unknown key, a name outside the zone, a zone the server does not serve) is an
// error that says which.
import t, { type Test } from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, connect, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { knotMissing, startKnot, unmet, type Knot } from '@headway/integration';
import descriptor, { checkOptions, UpdateClient } from '../src/index.js';

const ZONE = 'tailnet.example';
const NAME = `_acme-challenge.laptop.${ZONE}`;

async function knot(t: Test): Promise<Knot | undefined> {
  const missing = knotMissing();
  if (missing) { unmet(t, missing); return undefined; }
  const k = await startKnot({ zone: ZONE });
  t.teardown(() => k.stop());
  return k;
}

function client(k: Knot, over: Partial<{ secret: string; name: string; zone: string; now: () => number }> = {}): UpdateClient {
  return new UpdateClient({
    host: k.host, port: k.port, zone: over.zone ?? ZONE, ttl: 60, timeoutMs: 5000, nowSeconds: over.now,
    key: { name: over.name ?? k.key.name, algorithm: 'hmac-sha256', secret: Buffer.from(over.secret ?? k.key.secret, 'base64') },
  });
}

t.test('setTxt adds the TXT record set, a second setTxt replaces it, removeTxt deletes it (queried from Knot)', async (t) => {
  const k = await knot(t);
  if (!k) return;
  const c = client(k);
  t.same(await k.txt(NAME), [], 'nothing there at first');
  await c.setTxt(NAME, ['first-value-0123456789abcdefghijklmnopq']);
  t.same(await k.txt(NAME), ['first-value-0123456789abcdefghijklmnopq']);
  await c.setTxt(`${NAME}.`.toUpperCase(), ['second-value-a', 'third-value-b']);
  t.same((await k.txt(NAME)).sort(), ['second-value-a', 'third-value-b'], 'the whole set replaced, a trailing dot and case ignored');
  await c.removeTxt(NAME);
  t.same(await k.txt(NAME), [], 'removed');
  await c.removeTxt(NAME);
  t.pass('removing a set that is not there is no error');
  t.same(await k.txt(`other.${ZONE}`), [], 'no other name touched');
});

t.test('a wrong secret, an unknown key name and a skewed clock are refused with the TSIG error, and change nothing', async (t) => {
  const k = await knot(t);
  if (!k) return;
  const wrong = Buffer.alloc(32, 7).toString('base64');
  await t.rejects(client(k, { secret: wrong }).setTxt(NAME, ['v1']), /refused the TSIG key headway-acme \(hmac-sha256\): BADSIG/);
  await t.rejects(client(k, { name: 'not-a-key' }).setTxt(NAME, ['v1']), /refused the TSIG key not-a-key \(hmac-sha256\): BADKEY/);
  const skewed = () => Math.floor(Date.now() / 1000) - 3600;
  await t.rejects(client(k, { now: skewed }).setTxt(NAME, ['v1']), /BADTIME/);
  t.same(await k.txt(NAME), [], 'no record was added');
  const err = await client(k, { secret: wrong }).setTxt(NAME, ['v1']).catch((e: Error) => e);
  t.notMatch(String(err), Buffer.alloc(32, 7).toString('base64'), 'the secret is not in the message');
});

t.test('a name outside the zone is refused before sending; a zone the server does not serve gets NOTAUTH', async (t) => {
  const k = await knot(t);
  if (!k) return;
  await t.rejects(client(k).setTxt('_acme-challenge.laptop.elsewhere.example', ['v']), /_acme-challenge\.laptop\.elsewhere\.example is not inside the zone tailnet\.example/);
  await t.rejects(client(k, { zone: 'elsewhere.example' }).setTxt('_acme-challenge.a.elsewhere.example', ['v']), /NOTAUTH/);
  await t.rejects(new UpdateClient({ host: '127.0.0.1', port: 1, zone: ZONE, ttl: 60, timeoutMs: 1000, key: { name: 'k', algorithm: 'hmac-sha256', secret: Buffer.alloc(32) } })
    .setTxt(NAME, ['v']), /the DNS server at 127\.0\.0\.1:1: connect ECONNREFUSED/);
});

t.test('options: every problem named, the secret never echoed; a key file in BIND syntax is read', async (t) => {
  const secret = Buffer.alloc(32, 3).toString('base64');
  const { problems } = checkOptions({ server: 'dns.example:99999', zone: 'not a zone', key_secret: 'not base64!', key_secret_path: '/x', ttl: 0, extra: 1 });
  t.same(problems.map((p) => p.option).sort(), ['extra', 'key_name', 'key_secret', 'server', 'ttl', 'zone']);
  t.match(problems.find((p) => p.option === 'key_secret')!.message, /exactly one of key_secret/);
  t.same(checkOptions({ server: '127.0.0.1', zone: ZONE, key_name: 'k', key_secret: 'not base64!' }).problems,
    [{ option: 'key_secret', message: 'expected the key secret in base64' }], 'the bad secret is not quoted');
  const dir = mkdtempSync(join(tmpdir(), 'hw-rfc2136-'));
  writeFileSync(join(dir, 'k.key'), `key "headway-acme" {\n\talgorithm hmac-sha256;\n\tsecret "${secret}";\n};\n`);
  t.same(checkOptions({ server: '[::1]:5353', zone: `${ZONE}.`, key_name: 'headway-acme', key_secret_path: join(dir, 'k.key') }).problems, []);
  t.match(checkOptions({ server: 'ns1.example', zone: ZONE, key_name: 'k', key_secret_path: join(dir, 'missing') }).problems,
    [{ option: 'key_secret_path', message: /cannot read .*missing: ENOENT/ }]);
  t.same(await descriptor.validate!({ server: '127.0.0.1:53', zone: ZONE, key_name: 'k', key_secret: secret, key_algorithm: 'hmac-md5' }),
    [{ option: 'key_algorithm', message: 'expected one of hmac-sha256, hmac-sha384, hmac-sha512, hmac-sha224' }]);
});

t.test('a reply whose TSIG does not verify is an error (a relay flips one byte of Knot\'s MAC)', async (t) => {
  const k = await knot(t);
  if (!k) return;
  // The last 6 bytes of a TSIG RR are original id, error and other length; the MAC (32 bytes) ends just before.
  const relay = createServer((client) => {
    const upstream = connect(k.port, k.host);
    client.pipe(upstream);
    let reply = Buffer.alloc(0);
    upstream.on('data', (c: Buffer) => {
      reply = Buffer.concat([reply, c]);
      if (reply.length < 2 || reply.length < 2 + reply.readUInt16BE(0)) return;
      reply[reply.length - 7]! ^= 0xff;
      client.end(reply);
    });
    upstream.on('error', () => client.destroy());
  });
  await new Promise<void>((r) => relay.listen(0, '127.0.0.1', r));
  t.teardown(() => relay.close());
  const port = (relay.address() as AddressInfo).port;
  const c = new UpdateClient({ host: '127.0.0.1', port, zone: ZONE, ttl: 60, timeoutMs: 5000, key: { name: k.key.name, algorithm: 'hmac-sha256', secret: Buffer.from(k.key.secret, 'base64') } });
  await t.rejects(c.setTxt(NAME, ['relayed']), /the DNS server at 127\.0\.0\.1:\d+ signed its reply with another key: the reply's TSIG does not verify/);
});
