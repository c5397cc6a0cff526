import t from 'tap';
import { clientAddress, clientAddressOf, parseForwarded, parseTrustedProxy, resolveConfig, trustedProxies } from '../src/index.js';

const trusted = trustedProxies(['10.0.0.0/16', 'fd00::/8', '127.0.0.1']);

t.test('without a trusted list the TCP peer is the client, whatever the headers say', async (t) => {
  const spoof = { 'x-forwarded-for': '1.2.3.4', 'x-real-ip': '5.6.7.8', 'true-client-ip': '9.9.9.9' };
  t.equal(clientAddress('10.0.0.5', spoof, []), '10.0.0.5');
  t.equal(clientAddress('::ffff:192.0.2.7', {}, []), '192.0.2.7', 'an IPv4-mapped peer is its IPv4 address');
  t.equal(clientAddress(undefined, spoof, trusted), undefined, 'no peer, no address');
});

t.test('headers from a peer outside the list change nothing (spoofing)', async (t) => {
  const spoof = { 'x-forwarded-for': '1.2.3.4', 'x-real-ip': '5.6.7.8', 'true-client-ip': '9.9.9.9' };
  t.equal(clientAddress('203.0.113.1', spoof, trusted), '203.0.113.1');
  t.equal(clientAddress('10.1.0.0', spoof, trusted), '10.1.0.0', 'just outside 10.0.0.0/16');
  t.equal(clientAddress('2001:db8::1', spoof, trusted), '2001:db8::1');
  t.equal(clientAddress('127.0.0.2', spoof, trusted), '127.0.0.2', 'a bare address trusts that host only');
});

t.test('a trusted peer: True-Client-IP, then X-Real-IP, then X-Forwarded-For', async (t) => {
  const all = { 'true-client-ip': '1.2.3.4', 'x-real-ip': '5.6.7.8', 'x-forwarded-for': '9.10.11.12' };
  t.equal(clientAddress('10.0.0.5', all, trusted), '1.2.3.4');
  t.equal(clientAddress('10.0.0.5', { 'x-real-ip': '5.6.7.8', 'x-forwarded-for': '9.10.11.12' }, trusted), '5.6.7.8');
  t.equal(clientAddress('10.0.0.5', { 'x-forwarded-for': '9.10.11.12' }, trusted), '9.10.11.12');
  t.equal(clientAddress('10.0.0.5', { 'x-real-ip': 'garbage', 'x-forwarded-for': '9.10.11.12' }, trusted), '9.10.11.12', 'an unreadable header gives way to the next');
  t.equal(clientAddress('10.0.0.5', {}, trusted), '10.0.0.5', 'no header: the proxy itself');
  t.equal(clientAddress('::ffff:127.0.0.1', { 'x-real-ip': '198.51.100.9' }, trusted), '198.51.100.9', 'an IPv4-mapped peer matches its IPv4 prefix');
  t.equal(clientAddress('10.0.0.5', { 'x-real-ip': ['1.1.1.1', '2.2.2.2'] }, trusted), '2.2.2.2', 'a repeated one-address header: the last copy');
  t.equal(clientAddress('10.0.0.5', { 'x-real-ip': '0.0.0.0', 'x-forwarded-for': '9.10.11.12' }, trusted), '9.10.11.12', 'the unspecified address names nobody');
});

t.test('X-Forwarded-For is walked from the right past trusted proxies', async (t) => {
  t.equal(clientAddress('10.0.0.5', { 'x-forwarded-for': '203.0.113.99, 10.0.0.5' }, trusted), '203.0.113.99');
  t.equal(clientAddress('10.0.0.5', { 'x-forwarded-for': '6.6.6.6, 203.0.113.99, 10.0.7.1, 10.0.0.5' }, trusted), '203.0.113.99',
    'an address the client prepended does not win');
  t.equal(clientAddress('10.0.0.5', { 'x-forwarded-for': ['6.6.6.6, 203.0.113.99', '10.0.0.9'] }, trusted), '203.0.113.99', 'several headers are one list, in order');
  t.equal(clientAddress('10.0.0.5', { 'x-forwarded-for': '10.0.0.99, 10.0.0.5' }, trusted), '10.0.0.5', 'all trusted: the peer');
  t.equal(clientAddress('10.0.0.5', { 'x-forwarded-for': '203.0.113.99, junk, 10.0.0.5' }, trusted), '10.0.0.5',
    'an unreadable hop where the client should be: the peer, not an address further left');
  t.equal(clientAddress('10.0.0.5', { 'x-forwarded-for': '2001:db8::7, fd00::3' }, trusted), '2001:db8::7', 'IPv6 hops');
  t.equal(clientAddress('fd00::1', { 'x-forwarded-for': '[2001:db8::8]:5555' }, trusted), '2001:db8::8', 'an IPv6 peer and a hop with a port');
  t.equal(clientAddress('10.0.0.5', { 'x-forwarded-for': '198.51.100.1:4711' }, trusted), '198.51.100.1', 'an IPv4 hop with a port');
  t.equal(clientAddress('10.0.0.5', { 'x-forwarded-for': '::ffff:198.51.100.2' }, trusted), '198.51.100.2', 'an IPv4-mapped hop is IPv4');
});

t.test('forwarded address syntax', async (t) => {
  t.same(parseForwarded('fe80::1%eth0'), parseForwarded('fe80::1'), 'a zone is dropped');
  t.equal(parseForwarded('::'), undefined);
  t.equal(parseForwarded('example.com'), undefined);
  t.equal(parseForwarded(''), undefined);
});

t.test('clientAddressOf reads a Node request, distinct copies first', async (t) => {
  const of = clientAddressOf(trusted);
  const req = { socket: { remoteAddress: '127.0.0.1' }, headers: { 'x-real-ip': '1.1.1.1, 2.2.2.2' }, headersDistinct: { 'x-real-ip': ['1.1.1.1', '2.2.2.2'] } };
  t.equal(of(req), '2.2.2.2');
  t.equal(of({ socket: null, headers: {} }), undefined);
});

t.test('trusted_proxies entries: prefixes, bare addresses; a bad one is named', async (t) => {
  t.same(parseTrustedProxy('10.0.0.5/16'), { family: 4, base: 0x0a000000n, bits: 16 }, 'host bits are masked off');
  t.same(parseTrustedProxy('::ffff:10.0.0.1/128'), { family: 4, base: 0x0a000001n, bits: 32 }, 'an IPv4-mapped prefix is IPv4');
  t.match(parseTrustedProxy('0.0.0.0/0'), /length 0/);
  t.match(parseTrustedProxy('::/0'), /length 0/);
  t.match(parseTrustedProxy('not-an-ip'), /expected an IP address or CIDR prefix/);
  const ok = resolveConfig({ trusted_proxies: ['127.0.0.1/32', ' ::1 ', '10.0.0.0/8'] }, { env: {} });
  t.same(ok.problems.filter((p) => p.key === 'trusted_proxies'), []);
  t.same(ok.config.trusted_proxies, ['127.0.0.1/32', '::1', '10.0.0.0/8']);
  const bad = resolveConfig({ trusted_proxies: ['10.0.0.0/16', 'not-an-ip', '::/0'] }, { env: {} });
  const problem = bad.problems.find((p) => p.key === 'trusted_proxies');
  t.match(problem?.message, /\[1\] "not-an-ip": expected/);
  t.match(problem?.message, /\[2\] "::\/0": a prefix of length 0/);
  t.same(bad.config.trusted_proxies, [], 'a bad list is not half used');
  t.match(resolveConfig({ trusted_proxies: '10.0.0.0/8' }, { env: {} }).problems.find((p) => p.key === 'trusted_proxies')?.message, /expected a list/);
  const env = resolveConfig({}, { env: { HEADWAY_TRUSTED_PROXIES: '127.0.0.1/32, 10.0.0.0/8' } });
  t.same(env.config.trusted_proxies, ['127.0.0.1/32', '10.0.0.0/8'], 'from the environment as a comma list');
});
