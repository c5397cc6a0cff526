import t from 'tap';
import { applyMapResponse, emptyNetMap, MapFrameDecoder, encodeMapFrame, type MapResponse } from '../src/index.js';

t.test('DERPMap deltas keep old regions when Regions is null', async (t) => {
  const nm = emptyNetMap();
  applyMapResponse(nm, { Node: { ID: 1 }, DERPMap: { Regions: { '999': { RegionID: 999, RegionCode: 'a', Nodes: [] } }, HomeParams: { RegionScore: { '999': 1 } } } });
  applyMapResponse(nm, { DERPMap: { Regions: null, HomeParams: {} } });
  t.equal(nm.derpMap?.Regions?.['999']?.RegionCode, 'a');
  t.same(nm.derpMap?.HomeParams?.RegionScore, { '999': 1 });
  applyMapResponse(nm, { DERPMap: { Regions: { '900': { RegionID: 900, RegionCode: 'b', Nodes: [] } } } });
  t.same(Object.keys(nm.derpMap?.Regions ?? {}), ['900']);
});

t.test('older OnlineChange / PeerSeenChange maps are honoured; empty Peers is no change', async (t) => {
  const nm = emptyNetMap();
  applyMapResponse(nm, { Node: { ID: 1 }, Peers: [{ ID: 2 }, { ID: 3 }] });
  applyMapResponse(nm, { Peers: [], OnlineChange: { '2': true }, PeerSeenChange: { '3': true } }, new Date('2026-02-02T00:00:00Z'));
  t.equal(nm.peers.size, 2);
  t.equal(nm.peers.get(2)?.Online, true);
  t.equal(nm.peers.get(3)?.LastSeen, '2026-02-02T00:00:00.000Z');
  t.equal(nm.self?.ID, 1, 'absent Node leaves self unchanged');
});

t.test('packetFilter is the named lists in name order, whenever it is read, whatever messages came between', async (t) => {
  const rule = (port: number) => ({ SrcIPs: ['*'], DstPorts: [{ IP: '*', Ports: { First: port, Last: port } }] });
  const messages: MapResponse[] = [
    { PacketFilters: { b: [rule(2)], a: [rule(1)] } },
    { PacketFilters: { c: [rule(3)], a: null } },
    { Domain: 'no filter here' },
    { PacketFilter: [rule(9)] },
    { PacketFilters: { '*': null, z: [rule(26)], y: [rule(25)] } },
    { PacketFilters: { a0: [rule(4), rule(5)] } },
  ];
  // PacketFilter is the list named "base", which sorts between "b" and "c".
  const want = [[1, 2], [2, 3], [2, 3], [2, 9, 3], [25, 26], [4, 5, 25, 26]];
  // Read after every message, after some, or only at the end: the filter the client evaluates each time.
  for (const readAt of [[0, 1, 2, 3, 4, 5], [1, 4, 5], [5], [2, 3]]) {
    const nm = emptyNetMap();
    messages.forEach((m, k) => {
      applyMapResponse(nm, m);
      if (readAt.includes(k)) t.same(nm.packetFilter.map((r) => r.DstPorts![0]!.Ports.First), want[k], `message ${k + 1}, read after ${readAt.join(',')}`);
    });
  }
  const nm = emptyNetMap();
  applyMapResponse(nm, messages[0]!);
  nm.packetFilter = [rule(7)];
  t.same(nm.packetFilter, [rule(7)], 'a filter set by hand is kept until the next filter message');
  applyMapResponse(nm, messages[2]!);
  t.same(nm.packetFilter, [rule(7)]);
  applyMapResponse(nm, messages[1]!);
  t.same(nm.packetFilter, [rule(2), rule(3)]);
  t.same({ ...nm }.packetFilter, [rule(2), rule(3)], 'a copy holds the filter itself');
  // A netmap made by hand (not by emptyNetMap) gets its filter at once.
  const plain = { ...emptyNetMap(), packetFilters: new Map() };
  applyMapResponse(plain, messages[0]!);
  t.same(plain.packetFilter, [rule(1), rule(2)]);
});

t.test('MapFrameDecoder handles coalesced frames and rejects garbage', async (t) => {
  const d = new MapFrameDecoder();
  const both = Buffer.concat([encodeMapFrame({ KeepAlive: true }), encodeMapFrame({ Domain: 'x' })]);
  t.same(d.push(both), [{ KeepAlive: true }, { Domain: 'x' }]);
  t.equal(d.leftover, 0);
  const bad = Buffer.concat([Buffer.from([4, 0, 0, 0]), Buffer.from('nope')]);
  t.throws(() => new MapFrameDecoder().push(bad), /not valid zstd/);
  t.throws(() => new MapFrameDecoder().push(Buffer.from([0xff, 0xff, 0xff, 0xff])), /exceeds/);
});

t.test('MapFrameDecoder reassembles frames split at any byte, and devices sharing a frame share one frozen message', async (t) => {
  const big = { Peers: Array.from({ length: 300 }, (_, i) => ({ ID: i, Name: `n${i}.`, Key: `nodekey:${String(i).padStart(64, '0')}` })) };
  const stream = Buffer.concat([encodeMapFrame({ KeepAlive: true }), encodeMapFrame(big), encodeMapFrame({ Domain: 'y' })]);
  for (const step of [1, 3, 4, 7, 4096]) {
    const d = new MapFrameDecoder();
    const got: unknown[] = [];
    for (let i = 0; i < stream.length; i += step) got.push(...d.push(stream.subarray(i, i + step)));
    t.same(got, [{ KeepAlive: true }, big, { Domain: 'y' }], `chunks of ${step} bytes`);
    t.equal(d.leftover, 0);
  }
  const partial = new MapFrameDecoder();
  t.same(partial.push(stream.subarray(0, stream.length - 2)), [{ KeepAlive: true }, big]);
  t.ok(partial.leftover > 0, 'a truncated frame stays buffered');
  const frame = encodeMapFrame({ PeersChanged: [{ ID: 9 }] });
  const [a] = new MapFrameDecoder().push(frame) as Array<{ PeersChanged: Array<{ ID: number }> }>;
  const [b] = new MapFrameDecoder().push(Buffer.from(frame)) as Array<{ PeersChanged: Array<{ ID: number }> }>;
  t.same(b, { PeersChanged: [{ ID: 9 }] });
  t.ok(Object.isFrozen(a!.PeersChanged[0]), 'a shared message is frozen all the way down');
  t.throws(() => { a!.PeersChanged[0]!.ID = 10; }, TypeError, 'so no device can change what another received');
  t.equal(b!.PeersChanged[0]!.ID, 9);
});
