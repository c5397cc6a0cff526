import t from 'tap';
import { applyMapResponse, emptyNetMap, MapFrameDecoder, encodeMapFrame } from '../src/index.js';

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

t.test('MapFrameDecoder handles coalesced frames and rejects garbage', async (t) => {
  const d = new MapFrameDecoder();
  const both = Buffer.concat([encodeMapFrame({ KeepAlive: true }), encodeMapFrame({ Domain: 'x' })]);
  t.same(d.push(both), [{ KeepAlive: true }, { Domain: 'x' }]);
  t.equal(d.leftover, 0);
  const bad = Buffer.concat([Buffer.from([4, 0, 0, 0]), Buffer.from('nope')]);
  t.throws(() => new MapFrameDecoder().push(bad), /not valid zstd/);
  t.throws(() => new MapFrameDecoder().push(Buffer.from([0xff, 0xff, 0xff, 0xff])), /exceeds/);
});
