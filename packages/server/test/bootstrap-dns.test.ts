import t from 'tap';
import type { DerpMap } from '@headway/control';
import { BOOTSTRAP_DNS_TTL_MS, BootstrapDns, relayHostNames } from '../src/bootstrap-dns.js';

const region = (id: number, Nodes: Record<string, unknown>[]) => ({ RegionID: id, RegionCode: `r${id}`, RegionName: `r${id}`, Nodes });
const map: DerpMap = {
  Regions: {
    '1': region(1, [{ HostName: 'derp1.example.net' }, { HostName: 'derp1b.example.net' }]),
    '900': region(900, [{ HostName: '192.0.2.10' }, { HostName: 'derp1.example.net' }, { HostName: '' }]),
    '901': region(901, []),
  },
};

t.test('relay host names: every node of every region, once each', async (t) => {
  t.same(relayHostNames(map), ['derp1.example.net', 'derp1b.example.net', '192.0.2.10']);
});

t.test('the answer maps each resolvable relay name to its addresses; failures are left out', async (t) => {
  const asked: string[] = [];
  const resolve = async (name: string) => {
    asked.push(name);
    if (name === 'derp1b.example.net') throw new Error('ENOTFOUND');
    return name === '192.0.2.10' ? [name] : ['198.51.100.1', '2001:db8::1'];
  };
  let now = 1_000_000;
  const dns = new BootstrapDns(() => map, resolve, () => now);
  t.same(await dns.answer(), { 'derp1.example.net': ['198.51.100.1', '2001:db8::1'], '192.0.2.10': ['192.0.2.10'] });
  t.equal(asked.length, 3);
  now += BOOTSTRAP_DNS_TTL_MS - 1;
  await Promise.all([dns.answer(), dns.answer()]);
  t.equal(asked.length, 3, 'within the TTL no name is looked up again, however many ask');
  now += 1;
  await dns.answer();
  t.equal(asked.length, 6, 'after it, every name is looked up anew');
});

t.test('an empty DERP map answers an empty object', async (t) => {
  t.same(await new BootstrapDns(() => ({ Regions: {} }), async () => ['192.0.2.1']).answer(), {});
});
