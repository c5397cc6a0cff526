// The server's prefix arithmetic (ip/prefix.ts) as @headway/core reads it, and its agreement with the policy's
// own parsers: the address grammar is one, the prefix length grammar differs (parseIPPrefix takes leading zeros).
import { isIP } from 'node:net';
import t from 'tap';
import {
  EXIT_ROUTES, canonicalPrefix, formatAddr, formatIP, formatPrefix, isExitRoute, mask, parseAddr, parseIP,
  parseIPPrefix, parsePrefix, prefixContains, prefixLast, prefixOverlaps, prefixSize,
} from '../src/index.js';

t.test('parseIP reads what Node reads as an address, zones aside, as parseAddr does', async (t) => {
  t.same(parseIP('100.64.0.1'), { family: 4, value: 0x64400001n });
  t.same(parseIP('fd7a:115c:a1e0::1'), { family: 6, value: 0xfd7a115ca1e0n << 80n | 1n });
  t.same(parseIP('::ffff:1.2.3.4'), { family: 6, value: 0xffff01020304n });
  for (const bad of ['01.2.3.4', '1.2.3', '256.1.1.1', 'fe80::1%eth0', '1::2::3', '', ' 1.2.3.4', '1.2.3.4/32']) {
    t.equal(parseIP(bad), undefined, bad);
  }
  t.not(parseIP('10.0.0.1'), parseIP('10.0.0.1'), 'a new object on every call');
  // A generated corpus of near-addresses: the same verdicts as node:net, and the same numbers as parseAddr.
  let seed = 7;
  const rnd = (k: number) => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % k; };
  const groups = ['0', '1', 'ffff', 'FFFF', '00001', '', 'abc', '10'];
  const v4 = () => Array.from({ length: 4 }, () => ['0', '01', '255', '256', String(rnd(256))][rnd(5)]).join('.');
  let agreed = 0;
  for (let k = 0; k < 20000; k++) {
    let s: string;
    if (rnd(3) === 0) s = v4();
    else {
      s = Array.from({ length: rnd(10) }, () => groups[rnd(groups.length)]).join(':');
      if (rnd(2)) { const at = rnd(s.length + 1); s = s.slice(0, at) + (rnd(3) ? '::' : ':') + s.slice(at); }
      if (rnd(4) === 0) s += ':' + v4();
    }
    const ip = parseIP(s), a = parseAddr(s);
    const node = isIP(s) !== 0 && !s.includes('%');
    if (!!ip !== node || !!a !== node || (ip && a && (ip.value !== a.n || (ip.family === 6) !== a.v6))) {
      t.fail(`${JSON.stringify(s)}: parseIP ${ip ? formatIP(ip) : '-'}, parseAddr ${a ? formatAddr(a) : '-'}, node:net ${node}`);
      return;
    }
    if (node) agreed++;
  }
  t.ok(agreed > 1000, `${agreed} valid addresses read alike`);
});

t.test('formatIP is RFC 5952, as formatAddr', async (t) => {
  for (const text of ['0.0.0.0', '255.255.255.255', '::', '::1', '1::', 'fd7a:115c:a1e0::53', '1:0:0:1::1', '1::1:0:0:1:0', 'ffff::ffff:0:0:0', '1:2:3:4:5:6:0:8']) {
    t.equal(formatIP(parseIP(text)!), text);
  }
  // The longest run of zero groups is the one compressed, the first of equal ones; upper case is lowered.
  t.equal(formatIP(parseIP('1:0:0:1:0:0:0:1')!), '1:0:0:1::1');
  t.equal(formatIP(parseIP('1:0:0:1:0:0:1:0')!), '1::1:0:0:1:0');
  t.equal(formatIP(parseIP('2001:DB8:0:0:0:0:0:1')!), '2001:db8::1');
});

t.test('parseIPPrefix masks the base and takes the length as the server configuration writes it', async (t) => {
  t.same(parseIPPrefix('10.1.2.3/8'), { family: 4, base: 0x0a000000n, bits: 8 });
  t.same(parseIPPrefix('10.1.2.3'), { family: 4, base: 0x0a010203n, bits: 32 });
  t.same(parseIPPrefix('::1'), { family: 6, base: 1n, bits: 128 });
  // Leading zeros in the length: parseIPPrefix takes them, parsePrefix (the policy's, Go's netip) does not.
  t.same(parseIPPrefix('10.0.0.0/08'), { family: 4, base: 0x0a000000n, bits: 8 });
  t.equal(parsePrefix('10.0.0.0/08'), null);
  for (const bad of ['10.0.0.0/33', '::/129', '10.0.0.0/', '10.0.0.0/-1', '10.0.0.0/1.0', '10.0.0.0/+8', '10.0.0.0/0008', 'x/8']) {
    t.equal(parseIPPrefix(bad), undefined, bad);
  }
  t.equal(canonicalPrefix('fd7a:115c:a1e0:0:0::1/48'), 'fd7a:115c:a1e0::/48');
  t.equal(canonicalPrefix('192.168.1.7/24'), '192.168.1.0/24');
  t.equal(canonicalPrefix('192.168.1.7'), '192.168.1.7/32');
  t.equal(canonicalPrefix('nope'), undefined);
  t.equal(formatPrefix(parseIPPrefix('100.64.0.0/10')!), '100.64.0.0/10');
});

t.test('prefix arithmetic', async (t) => {
  const cgnat = parseIPPrefix('100.64.0.0/10')!;
  t.equal(mask(4, 0), 0n);
  t.equal(mask(4, 10), 0xffc00000n);
  t.equal(mask(6, 128), (1n << 128n) - 1n);
  t.equal(prefixSize(cgnat), 1n << 22n);
  t.equal(formatIP({ family: 4, value: prefixLast(cgnat) }), '100.127.255.255');
  t.ok(prefixContains(cgnat, parseIP('100.100.100.100')!));
  t.notOk(prefixContains(cgnat, parseIP('100.128.0.0')!));
  t.notOk(prefixContains(parseIPPrefix('::/0')!, parseIP('1.2.3.4')!), 'families never mix');
  t.ok(prefixOverlaps(cgnat, parseIPPrefix('100.100.0.0/16')!));
  t.notOk(prefixOverlaps(cgnat, parseIPPrefix('10.0.0.0/8')!));
  t.notOk(prefixOverlaps(parseIPPrefix('0.0.0.0/0')!, parseIPPrefix('::/0')!));
});

t.test('exit routes are the two default routes, as written', async (t) => {
  t.same([...EXIT_ROUTES], ['0.0.0.0/0', '::/0']);
  t.ok(isExitRoute('0.0.0.0/0'));
  t.ok(isExitRoute('::/0'));
  t.notOk(isExitRoute('0.0.0.0/1'));
  t.notOk(isExitRoute('0::/0'), 'text as advertised, not its meaning');
});
