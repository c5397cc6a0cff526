// AcmeDns on a clock the test moves: what a device may publish, what the DNS plugin is asked to do and when
// each value is withdrawn. The plugin here is an in-memory zone (the port's contract, not a DNS server; the
// RFC 2136 plugin against Knot and the real client are in packages/dns-rfc2136 and the interop test).
import t from 'tap';
import { createLogger, type AcmeTxtPublisher, type Node, type SetDNSRequest } from '@headway/core';
import { AcmeDns } from '../src/acme-dns.js';
import { FakeClock } from './fake-clock.js';

const BASE = 'tailnet.example';
const LIFETIME = 600_000;
const V = (c: string) => c.repeat(43);

class MemoryZone implements AcmeTxtPublisher {
  readonly txt = new Map<string, string[]>();
  readonly calls: string[] = [];
  failNext = false;
  async setTxt(fqdn: string, values: string[]): Promise<void> {
    this.calls.push(`set ${fqdn} ${values.join(',')}`);
    if (this.failNext) { this.failNext = false; throw new Error('REFUSED'); }
    this.txt.set(fqdn, [...values]);
  }
  async removeTxt(fqdn: string): Promise<void> {
    this.calls.push(`remove ${fqdn}`);
    this.txt.delete(fqdn);
  }
}

function node(id: number, givenName: string, expiry: Date | null = null): Node {
  return { id, givenName, expiry } as Node;
}

function setup(on = true) {
  const publisher = on ? new MemoryZone() : undefined;
  const clock = new FakeClock();
  const logs: string[] = [];
  const acme = new AcmeDns({
    publisher, lifetimeMs: LIFETIME, clock, now: () => 1_000_000,
    certDomainOf: (n) => `${n.givenName}.${BASE}`,
    logger: createLogger({ write: (l) => logs.push(l) }),
  });
  return { acme, clock, zone: publisher!, logs };
}

const req = (over: Partial<SetDNSRequest> = {}): SetDNSRequest =>
  ({ Version: 130, NodeKey: `nodekey:${'0'.repeat(64)}`, Name: `_acme-challenge.web.${BASE}`, Type: 'TXT', Value: V('a'), ...over });

/** settle lets the queued DNS changes (promises) run. */
const settle = () => new Promise((r) => setImmediate(r));

t.test('a device publishes its own challenge value; it is removed when txt_lifetime ends', async (t) => {
  const { acme, clock, zone } = setup();
  t.same(await acme.handle(node(1, 'web'), req({ Name: `_ACME-Challenge.Web.${BASE}.` })), { status: 200 }, 'case and a trailing dot do not matter');
  t.same(zone.txt.get(`_acme-challenge.web.${BASE}`), [V('a')]);
  clock.advance(LIFETIME - 1);
  await settle();
  t.same(zone.txt.get(`_acme-challenge.web.${BASE}`), [V('a')], 'still there just before its lifetime ends');
  clock.advance(1);
  await settle();
  t.notOk(zone.txt.has(`_acme-challenge.web.${BASE}`), 'removed once it ends');
  t.same(zone.calls, [`set _acme-challenge.web.${BASE} ${V('a')}`, `remove _acme-challenge.web.${BASE}`]);
  t.equal(clock.pending, 0, 'no timer left');
});

t.test('values at one name accumulate, each expiring on its own; the oldest goes beyond four', async (t) => {
  const { acme, clock, zone } = setup();
  const name = `_acme-challenge.web.${BASE}`;
  await acme.handle(node(1, 'web'), req({ Value: V('a') }));
  clock.advance(1000);
  await acme.handle(node(1, 'web'), req({ Value: V('b') }));
  t.same(zone.txt.get(name), [V('a'), V('b')], 'a wildcard and its base name can be validated at once');
  clock.advance(LIFETIME - 1000);
  await settle();
  t.same(zone.txt.get(name), [V('b')], 'the first expired, the second stays');
  for (const c of 'cdef') await acme.handle(node(1, 'web'), req({ Value: V(c) }));
  t.same(zone.txt.get(name), [V('c'), V('d'), V('e'), V('f')], 'at most four values: the oldest replaced');
  await acme.handle(node(1, 'web'), req({ Value: V('d') }));
  t.same(zone.txt.get(name), [V('c'), V('e'), V('f'), V('d')], 'asking again for a value renews it');
  t.equal(clock.pending, 4, 'one timer per value held');
});

t.test('refusals: another name, another type, a bad value, an expired node, certificates off', async (t) => {
  const { acme, zone } = setup();
  t.same(await acme.handle(node(1, 'web'), req({ Name: `_acme-challenge.db.${BASE}` })),
    { status: 403, text: `name "_acme-challenge.db.${BASE}" is not allowed: this device may set only _acme-challenge.web.${BASE}` });
  t.same(await acme.handle(node(1, 'web'), req({ Name: `web.${BASE}` })), { status: 403, text: `name "web.${BASE}" is not allowed: this device may set only _acme-challenge.web.${BASE}` });
  t.equal((await acme.handle(node(1, 'web'), req({ Name: `_acme-challenge.sub.web.${BASE}` }))).status, 403, 'not even a name below its own');
  t.same(await acme.handle(node(1, 'web'), req({ Type: 'A' })),
    { status: 400, text: 'record type "A" is not allowed: a device may set only the TXT record of the ACME DNS-01 challenge' });
  t.same(await acme.handle(node(1, 'web'), req({ Value: 'has spaces and "quotes"' })),
    { status: 400, text: 'Value must be an ACME DNS-01 digest (base64url, 16 to 128 characters)' });
  t.same(await acme.handle(node(1, 'web', new Date(999_999)), req()), { status: 403, text: 'the node key has expired: log in again' });
  t.same(zone.calls, [], 'the DNS plugin was never asked');
  const off = setup(false);
  t.same(await off.acme.handle(node(1, 'web'), req()),
    { status: 403, text: 'device certificates are not enabled on this server (dns.certificates.enabled is false)' });
});

t.test('a DNS plugin failure is a 502 with the reason in the log only; the name keeps what it had', async (t) => {
  const { acme, clock, zone, logs } = setup();
  const name = `_acme-challenge.web.${BASE}`;
  await acme.handle(node(1, 'web'), req({ Value: V('a') }));
  zone.failNext = true;
  t.same(await acme.handle(node(1, 'web'), req({ Value: V('b') })),
    { status: 502, text: `the DNS provider did not publish ${name}; the server log says why` });
  t.match(logs.join('\n'), /could not publish an ACME challenge record.*REFUSED/);
  t.same(acme.published(), { [name]: [V('a')] }, 'the value that failed is not held');
  t.equal(clock.pending, 1, 'and has no timer');
  clock.advance(LIFETIME);
  await settle();
  t.notOk(zone.txt.has(name), 'the earlier value still expires');
});

t.test('close removes every record this instance published', async (t) => {
  const { acme, clock, zone } = setup();
  await acme.handle(node(1, 'web'), req());
  await acme.handle(node(2, 'db'), req({ Name: `_acme-challenge.db.${BASE}` }));
  await acme.close();
  t.same([...zone.txt.keys()], []);
  t.equal(clock.pending, 0);
  t.same(acme.published(), {});
});

t.test('more than ten requests a minute for one name get a 429 and reach no DNS server', async (t) => {
  const { acme, clock, zone } = setup();
  for (let i = 0; i < 10; i++) t.equal((await acme.handle(node(1, 'web'), req({ Value: V(String(i)) }))).status, 200);
  t.same(await acme.handle(node(1, 'web'), req({ Value: V('z') })),
    { status: 429, text: `too many set-dns requests for _acme-challenge.web.${BASE}: at most 10 a minute` });
  t.equal(zone.calls.length, 10, 'the eleventh never reached the plugin');
  t.equal((await acme.handle(node(2, 'db'), req({ Name: `_acme-challenge.db.${BASE}` }))).status, 200, 'another name has its own count');
  clock.advance(60_000);
  t.equal((await acme.handle(node(1, 'web'), req({ Value: V('z') }))).status, 200, 'a minute later it is taken again');
});
