import t from 'tap';
import { AddressAllocator, NodeAddresses, parseIP, formatIP, parsePrefix, formatPrefix, canonicalPrefix } from '../src/index.js';

t.test('ip parsing and formatting round-trip', async (t) => {
  for (const ip of ['100.64.0.1', '0.0.0.0', '255.255.255.255', 'fd7a:115c:a1e0::1', '::', '::1', '2001:db8::8:800:200c:417a']) {
    t.equal(formatIP(parseIP(ip)!), ip);
  }
  t.equal(formatIP(parseIP('fd7a:115c:a1e0:0:0:0:0:1')!), 'fd7a:115c:a1e0::1');
  t.equal(parseIP('1.2.3'), undefined);
  t.equal(canonicalPrefix('10.1.2.3/8'), '10.0.0.0/8');
  t.equal(formatPrefix(parsePrefix('fd7a:115c:a1e0::/48')!), 'fd7a:115c:a1e0::/48');
  t.equal(parsePrefix('10.0.0.0/33'), undefined);
});

t.test('sequential allocation skips network, broadcast and reserved ranges', async (t) => {
  const a = new AddressAllocator('100.100.99.254/23', 'sequential'); // 100.100.98.0 - 100.100.99.255
  const got: string[] = [];
  for (let i = 0; i < 600; i++) { const ip = a.next(); if (!ip) break; got.push(ip); }
  t.equal(got[0], '100.100.98.1', 'never the network address');
  t.notOk(got.includes('100.100.99.255'), 'never the broadcast address');
  t.equal(got.length, 510);
  const r = new AddressAllocator('100.100.100.0/22', 'sequential'); // contains 100.100.100.0/24
  const all: string[] = [];
  for (let ip = r.next(); ip; ip = r.next()) all.push(ip);
  t.notOk(all.some((ip) => ip.startsWith('100.100.100.')), 'never inside 100.100.100.0/24');
  const q = new AddressAllocator('100.115.92.0/22', 'sequential');
  const all2: string[] = [];
  for (let ip = q.next(); ip; ip = q.next()) all2.push(ip);
  t.notOk(all2.some((ip) => ip.startsWith('100.115.92.') || ip.startsWith('100.115.93.')), 'never inside 100.115.92.0/23');
});

t.test('released addresses come back; used ones are skipped', async (t) => {
  const a = new AddressAllocator('10.0.0.0/29', 'sequential'); // 6 usable
  a.markUsed('10.0.0.2');
  const got = [a.next(), a.next(), a.next(), a.next(), a.next()];
  t.same(got, ['10.0.0.1', '10.0.0.3', '10.0.0.4', '10.0.0.5', '10.0.0.6']);
  t.equal(a.next(), undefined, 'full');
  a.release('10.0.0.4');
  t.equal(a.next(), '10.0.0.4');
});

t.test('random allocation stays inside the prefix without duplicates', async (t) => {
  const a = new AddressAllocator('fd7a:115c:a1e0::/120', 'random');
  const seen = new Set<string>();
  for (let i = 0; i < 254; i++) {
    const ip = a.next()!;
    t.ok(ip.startsWith('fd7a:115c:a1e0::'), ip);
    t.notOk(seen.has(ip), `no duplicate ${ip}`);
    seen.add(ip);
  }
  t.equal(a.next(), undefined);
});

t.test('an address given back by a rolled-back write is the next one proposed', async (t) => {
  const a = new AddressAllocator('10.0.0.0/24', 'sequential');
  t.equal(a.next(), '10.0.0.1');
  const p = a.next(), q = a.next();
  t.same([p, q], ['10.0.0.2', '10.0.0.3']);
  a.giveBack(q);
  a.giveBack(p);
  t.same([a.next(), a.next(), a.next()], ['10.0.0.2', '10.0.0.3', '10.0.0.4'], 'as if the rolled-back proposals never happened');
  a.giveBack('192.168.0.1');
  t.equal(a.next(), '10.0.0.5', 'an address outside the prefix changes nothing');
});

t.test('NodeAddresses: one address of each enabled family, or none when either is full', async (t) => {
  const both = new NodeAddresses({ v4: '10.0.0.0/30', v6: 'fd00::/125', allocation: 'sequential' });
  t.same(both.reserve(), { ipv4: '10.0.0.1', ipv6: 'fd00::1' });
  t.same(both.reserve(), { ipv4: '10.0.0.2', ipv6: 'fd00::2' });
  t.throws(() => both.reserve(), { code: 'conflict', message: /no free addresses/ }, 'IPv4 is full');
  both.giveBack('10.0.0.2', 'fd00::2');
  t.same(both.reserve(), { ipv4: '10.0.0.2', ipv6: 'fd00::2' }, 'given back, given again; the failed reserve kept no IPv6 address');

  t.same(both.fill({ ipv4: '10.0.0.1', ipv6: null }), { ipv4: '10.0.0.1', ipv6: 'fd00::3' }, 'fill adds the family a node lacks');
  t.equal(both.fill({ ipv4: '10.0.0.1', ipv6: 'fd00::1' }), undefined, 'and nothing to a node lacking none');
  t.throws(() => both.fill({ ipv4: null, ipv6: null }), { code: 'conflict' });
  t.same(both.fill({ ipv4: '10.0.0.1', ipv6: null }), { ipv4: '10.0.0.1', ipv6: 'fd00::4' }, 'a failed fill took no IPv6 address');

  const tight = new NodeAddresses({ v4: '10.1.0.0/29', v6: 'fd00::/126', allocation: 'sequential' });
  tight.fill({ ipv4: null, ipv6: null });
  tight.fill({ ipv4: null, ipv6: null });
  t.throws(() => tight.fill({ ipv4: null, ipv6: null }), { code: 'conflict' }, 'IPv6 is full');
  t.same(tight.fill({ ipv4: null, ipv6: 'fd00::9' }), { ipv4: '10.1.0.3', ipv6: 'fd00::9' }, 'the IPv4 address the failed fill took is free again');

  const v4only = new NodeAddresses({ v4: '10.2.0.0/29', v6: '', allocation: 'sequential' });
  v4only.markUsed({ ipv4: '10.2.0.1', ipv6: 'fd00::1' });
  t.same(v4only.reserve(), { ipv4: '10.2.0.2', ipv6: null }, 'an address a node holds is skipped; a disabled family gives null');
});
