import t, { type Test } from 'tap';
import { execFile } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { connect } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DerpClient } from '../src/client.js';
import { certificateCovers, certificateSha256, loadOrCreateRelayCertificate, RELAY_CERT_VALIDITY_DAYS } from '../src/cert.js';
import { describeTlsFailure, RelayListener } from '../src/listener.js';
import { HandshakeFailureLog } from '../src/failurelog.js';
import { DerpServer, type DerpLogger } from '../src/server.js';
import { generateDerpKeyPair } from '../src/keys.js';
import { discoPacket, waitFor } from './helpers.js';

interface Line { level: string; msg: string; fields: Record<string, unknown> }

function capture(): DerpLogger & { lines: Line[] } {
  const lines: Line[] = [];
  const push = (level: string) => (msg: string, fields: Record<string, unknown> = {}) => lines.push({ level, msg, fields });
  return { lines, debug: push('debug'), info: push('info'), warn: push('warn') };
}

const failures = (log: { lines: Line[] }) => log.lines.filter((l) => l.msg === 'derp: relay connection failed its handshake');

function tempDir(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'headway-derp-tls-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

t.test('relay certificate: generated 0600, covers the host names, pinned by its DER SHA-256, reused while valid', async (t) => {
  const dir = tempDir(t);
  const certPath = join(dir, 'derp_tls_cert.pem');
  const keyPath = join(dir, 'derp_tls_key.pem');
  const first = await loadOrCreateRelayCertificate({ certPath, keyPath, hostNames: ['127.0.0.1', 'relay.example.com', '[::1]'] });
  t.equal(first.created, true);
  t.equal(first.reason, 'no certificate yet');
  for (const p of [certPath, keyPath]) t.equal(statSync(p).mode & 0o777, 0o600, `${p} is mode 0600`);
  const x = new X509Certificate(readFileSync(certPath, 'utf8'));
  t.equal(first.sha256, x.fingerprint256.replace(/:/g, '').toLowerCase(), 'the pin is the SHA-256 of the DER certificate');
  t.equal(certificateSha256(first.cert), first.sha256);
  t.match(first.sha256, /^[0-9a-f]{64}$/);
  t.ok(certificateCovers(x, '127.0.0.1') && certificateCovers(x, 'relay.example.com') && certificateCovers(x, '::1'), 'every host name is a subject alternative name');
  t.notOk(certificateCovers(x, '10.0.0.1'), 'and nothing else');
  t.equal(x.ca, false, 'not a CA');
  t.equal(x.publicKey.asymmetricKeyType, 'ec');
  const days = (new Date(x.validTo).getTime() - Date.now()) / 86400_000;
  t.ok(days > RELAY_CERT_VALIDITY_DAYS - 2 && days <= RELAY_CERT_VALIDITY_DAYS, `valid for about a year (${days.toFixed(1)} days)`);
  t.ok(new Date(x.validFrom).getTime() < Date.now() - 3600_000, 'backdated against slow device clocks');

  const again = await loadOrCreateRelayCertificate({ certPath, keyPath, hostNames: ['127.0.0.1', 'relay.example.com'] });
  t.equal(again.created, false, 'a restart reuses the stored certificate');
  t.equal(again.sha256, first.sha256, 'so the pin devices hold stays valid');

  const renamed = await loadOrCreateRelayCertificate({ certPath, keyPath, hostNames: ['relay2.example.com'] });
  t.equal(renamed.created, true);
  t.match(renamed.reason, /does not cover relay2\.example\.com/, 'a changed host name regenerates');
  t.not(renamed.sha256, first.sha256);

  const late = await loadOrCreateRelayCertificate({ certPath, keyPath, hostNames: ['relay2.example.com'], now: new Date(Date.now() + (RELAY_CERT_VALIDITY_DAYS - 10) * 86400_000) });
  t.equal(late.created, true);
  t.match(late.reason, /expires/, 'a certificate within 30 days of expiry is replaced');

  unlinkSync(keyPath);
  const noKey = await loadOrCreateRelayCertificate({ certPath, keyPath, hostNames: ['relay2.example.com'] });
  t.equal(noKey.created, true, 'a missing key file regenerates the pair');
  t.equal(statSync(keyPath).mode & 0o777, 0o600);

  writeFileSync(certPath, 'not a certificate');
  const corrupt = await loadOrCreateRelayCertificate({ certPath, keyPath, hostNames: ['relay2.example.com'] });
  t.equal(corrupt.created, true);
  t.match(corrupt.reason, /unreadable/);

  const other = await loadOrCreateRelayCertificate({ certPath: join(dir, 'o.pem'), keyPath: join(dir, 'o.key'), hostNames: ['relay2.example.com'] });
  writeFileSync(keyPath, other.key);
  const mismatched = await loadOrCreateRelayCertificate({ certPath, keyPath, hostNames: ['relay2.example.com'] });
  t.equal(mismatched.created, true);
  t.match(mismatched.reason, /is not the key of/);
  await t.rejects(loadOrCreateRelayCertificate({ certPath, keyPath, hostNames: [] }), /at least one host name/);
});

async function startListener(t: Test, options: { loginTimeoutMs?: number; verify?: (key: string) => boolean; handshakeTimeoutMs?: number } = {}) {
  const dir = tempDir(t);
  const log = capture();
  const cert = await loadOrCreateRelayCertificate({ certPath: join(dir, 'c.pem'), keyPath: join(dir, 'k.pem'), hostNames: ['127.0.0.1'] });
  const derp = new DerpServer({
    privateKey: generateDerpKeyPair().privateKey,
    logger: log,
    loginTimeoutMs: options.loginTimeoutMs,
    verifyClient: options.verify ? async (key) => options.verify!(key) : undefined,
  });
  const listener = await RelayListener.listen({ derp, cert: cert.cert, key: cert.key, host: '127.0.0.1', port: 0, handshakeTimeoutMs: options.handshakeTimeoutMs ?? 500 });
  t.teardown(async () => {
    await derp.close();
    await listener.close();
  });
  const port = listener.address().port;
  return { derp, listener, log, cert, port, dir };
}

t.test('relay port: TLS and plain HTTP clients on one port relay to each other', async (t) => {
  const { derp, port, cert, listener } = await startListener(t);
  t.ok(port > 0, `bound port ${port}`);
  const overTls = await DerpClient.connect({ url: `https://127.0.0.1:${port}/derp`, tls: { ca: cert.cert } });
  t.teardown(() => overTls.close());
  const overHttp = await DerpClient.connect({ url: `http://127.0.0.1:${port}/derp` });
  t.teardown(() => overHttp.close());
  const overWss = await DerpClient.connect({ url: `wss://127.0.0.1:${port}/derp`, tls: { ca: cert.cert } });
  t.teardown(() => overWss.close());
  await waitFor(() => derp.clientCount === 3, 3000, 'three logged-in clients');
  const packet = discoPacket();
  overTls.send(overHttp.publicKey, packet);
  const got = await overHttp.recv();
  t.match(got, { type: 'packet', source: overTls.publicKeyString }, 'TLS -> plain');
  t.same((got as { data: Buffer }).data, packet);
  overHttp.send(overWss.publicKey, packet);
  t.match(await overWss.recv(), { type: 'packet', source: overHttp.publicKeyString }, 'plain -> WebSocket over TLS');

  const probe = await new Promise<{ status: number; authorized: boolean; protocol: string | null }>((resolve, reject) => {
    https.get(`https://127.0.0.1:${port}/derp/probe`, { ca: cert.cert }, (res) => {
      const sock = res.socket as import('node:tls').TLSSocket;
      resolve({ status: res.statusCode ?? 0, authorized: sock.authorized, protocol: sock.getProtocol() });
      res.resume();
    }).on('error', reject);
  });
  t.same(probe, { status: 200, authorized: true, protocol: 'TLSv1.3' }, 'the latency probe answers over TLS 1.3 with the pinned certificate');
  t.same(listener.connections, { tls: 3, plain: 1 }, 'three TLS connections (DERP, WebSocket, probe) and one plain');
  const other = await fetch(`http://127.0.0.1:${port}/key?v=100`);
  t.equal(other.status, 404, 'nothing but the relay on this port');
});

t.test('relay port: failed handshakes are logged once per address and reason, with the reason', async (t) => {
  const { port, log } = await startListener(t, { loginTimeoutMs: 300, verify: () => false });

  // Not HTTP and not TLS.
  for (let i = 0; i < 3; i++) {
    const s = connect({ host: '127.0.0.1', port });
    s.on('error', () => undefined);
    s.resume();
    s.end(Buffer.from('\x01\x02garbage\r\n\r\n'));
    await new Promise((r) => s.once('close', r));
  }
  await waitFor(() => failures(log).length >= 1, 3000, 'a logged failure');
  let lines = failures(log);
  t.equal(lines.length, 1, 'three identical failures give one line');
  t.equal(lines[0]!.level, 'warn');
  t.match(lines[0]!.fields, { reason: /not an HTTP request on the relay port/, remote: /^127\.0\.0\.1:\d+$/ });

  // A TLS record that is not a client hello.
  const s = connect({ host: '127.0.0.1', port });
  s.on('error', () => undefined);
  s.end(Buffer.from([0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5]));
  await waitFor(() => failures(log).length >= 2, 3000, 'the TLS failure line');
  lines = failures(log);
  t.match(lines[1]!.fields, { reason: /^TLS/, remote: /^127\.0\.0\.1/ });

  // A DERP client the relay does not admit.
  await t.rejects(DerpClient.connect({ url: `http://127.0.0.1:${port}/derp`, timeoutMs: 3000 }));
  await waitFor(() => failures(log).some((l) => /not admitted/.test(String(l.fields.reason))), 3000, 'the refusal line');
  const refused = failures(log).find((l) => /not admitted/.test(String(l.fields.reason)))!;
  t.match(refused.fields, { remote: '127.0.0.1', node_key: /^nodekey:[0-9a-f]{64}$/ });

  // A client that opens the upgrade and never logs in.
  const idle = connect({ host: '127.0.0.1', port });
  idle.on('error', () => undefined);
  idle.write('GET /derp HTTP/1.1\r\nHost: x\r\nUpgrade: DERP\r\nConnection: Upgrade\r\n\r\n');
  await waitFor(() => failures(log).some((l) => /did not log in within 300 ms/.test(String(l.fields.reason))), 3000, 'the login timeout line');
  idle.destroy();

  // A connection that sends nothing at all.
  const silent = connect({ host: '127.0.0.1', port });
  silent.on('error', () => undefined);
  await waitFor(() => failures(log).some((l) => /sent nothing within 500 ms/.test(String(l.fields.reason))), 3000, 'the silent-connection line');
  silent.destroy();
  t.comment(failures(log).map((l) => `${l.level} ${JSON.stringify(l.fields)}`).join('\n'));
});

t.test('relay port: one byte (0x16 or G), partial headers or a bare TLS handshake do not hold a connection open (100/100 still open after 150 s)', async (t) => {
  // The login timer is far away, so only the handshake deadline can close these connections.
  const { port, log, cert } = await startListener(t, { loginTimeoutMs: 60_000, handshakeTimeoutMs: 300 });
  const plainStalls: Buffer[] = [
    Buffer.from([0x16]),
    Buffer.from('G'),
    Buffer.from('GET /derp HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: DERP\r\n'),
    Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01]), // a client hello's first bytes
    Buffer.from('GET /derp/probe HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nG'), // answered, then stalls in its next request
  ];
  const answered = new Set<unknown>();
  const sockets: import('node:net').Socket[] = [];
  const closed = new Set<unknown>();
  const track = (s: import('node:net').Socket) => {
    s.on('error', () => undefined);
    s.on('data', (d: Buffer) => { if (d.toString('latin1').startsWith('HTTP/1.1 200 ')) answered.add(s); });
    s.once('close', () => closed.add(s));
    sockets.push(s);
    t.teardown(() => s.destroy());
  };
  for (const bytes of plainStalls) {
    for (let i = 0; i < 5; i++) {
      const s = connect({ host: '127.0.0.1', port });
      track(s);
      s.write(bytes);
    }
  }
  // A finished TLS handshake followed by nothing, by half a request head, or by an answered request and half the next.
  for (const after of ['', 'GET /derp HTTP/1.1\r\nHost: 127.0.0.1\r\n', 'GET /derp/probe HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /derp']) {
    for (let i = 0; i < 5; i++) {
      const s = tlsConnect({ host: '127.0.0.1', port, ca: cert.cert });
      track(s);
      await new Promise<void>((resolve, reject) => { s.once('secureConnect', resolve); s.once('error', reject); });
      if (after) s.write(after);
    }
  }
  // A real client that completes its request head in time is not cut off by the deadline.
  const client = await DerpClient.connect({ url: `https://127.0.0.1:${port}/derp`, tls: { ca: cert.cert } });
  t.teardown(() => client.close());

  await waitFor(() => closed.size === sockets.length, 5000, `all ${sockets.length} stalled connections to close`).catch(() => undefined);
  t.equal(closed.size, sockets.length, `${closed.size}/${sockets.length} stalled connections closed`);
  t.equal(answered.size, 10, 'the kept-alive connections got their first answer before stalling');
  t.ok(client.isOpen, 'the logged-in client is still connected');
  await client.ping();
  const reasons = new Set(failures(log).map((l) => String(l.fields.reason)));
  t.ok([...reasons].some((r) => /did not finish the TLS handshake within 300 ms/.test(r)), 'a stalled TLS handshake is logged as such');
  t.ok([...reasons].some((r) => /sent no complete HTTP request within 300 ms/.test(r)), 'a stalled request head is logged as such');
});

t.test('relay port: a client that refuses the certificate is logged as such (openssl s_client)', async (t) => {
  const { port, log } = await startListener(t);
  // s_client with no trusted root and -verify_return_error aborts with an alert,
  // the way tailscaled does when the pin does not match.
  const r = await new Promise<{ err: { code?: string | number | null } | null }>((resolve) => {
    const child = execFile('openssl', ['s_client', '-connect', `127.0.0.1:${port}`, '-verify_return_error', '-no-CApath', '-no-CAfile', '-no-CAstore'], { timeout: 10_000 }, (err) => resolve({ err }));
    child.stdin?.end();
  });
  if (r.err && r.err.code === 'ENOENT') {
    t.comment('skipped: openssl is not installed');
    return;
  }
  await waitFor(() => failures(log).length >= 1, 5000, 'the refused-certificate line');
  t.match(failures(log)[0]!.fields, { reason: /the client rejected the relay certificate/, remote: /^127\.0\.0\.1:\d+$/ });
  t.equal(failures(log)[0]!.level, 'warn');
});

t.test('describeTlsFailure names the likely cause', async (t) => {
  const e = (code: string, message = code) => Object.assign(new Error(message), { code });
  t.match(describeTlsFailure(e('ERR_SSL_SSLV3_ALERT_BAD_CERTIFICATE')), /rejected the relay certificate.*pin/);
  t.match(describeTlsFailure(e('ERR_SSL_WRONG_VERSION_NUMBER')), /not a TLS client hello/);
  t.match(describeTlsFailure(e('ECONNRESET')), /closed the connection during the handshake/);
  t.match(describeTlsFailure(e('ERR_SSL_SOMETHING_NEW')), /TLS handshake failed: ERR_SSL_SOMETHING_NEW/);
});

t.test('HandshakeFailureLog: one line per address and reason per interval, counting repeats; a global cap', async (t) => {
  const log = capture();
  let now = 1_000_000;
  const h = new HandshakeFailureLog(log, { intervalMs: 60_000, maxLinesPerInterval: 3, now: () => now });
  t.equal(h.report({ remote: '10.0.0.1:1000', reason: 'bad' }), true);
  for (let i = 0; i < 5; i++) t.equal(h.report({ remote: `10.0.0.1:${2000 + i}`, reason: 'bad' }), false, 'same address (other port), same reason: held back');
  t.equal(h.report({ remote: '10.0.0.1:1000', reason: 'other' }), true, 'another reason is its own line');
  t.equal(h.report({ remote: '[fd00::1]:5', reason: 'bad', level: 'warn' }), true, 'another address is its own line');
  t.equal(h.report({ remote: '10.0.0.2:1', reason: 'bad' }), false, 'over the cap of 3 lines per interval');
  t.equal(log.lines.length, 3);
  t.equal(log.lines[2]!.level, 'warn');
  now += 60_000;
  t.equal(h.report({ remote: '10.0.0.1:9', reason: 'bad' }), true, 'after the interval the pair logs again');
  t.match(log.lines[3]!.fields, { remote: '10.0.0.1:9', reason: 'bad', repeats_not_logged: 5, other_failures_not_logged: 1 });
  const small = new HandshakeFailureLog(capture(), { maxTracked: 4, maxLinesPerInterval: 1000, now: () => now });
  for (let i = 0; i < 100; i++) small.report({ remote: `10.1.0.${i}:1`, reason: 'x' });
  t.ok((small as unknown as { entries: Map<string, unknown> }).entries.size <= 4, 'memory stays bounded');
});
