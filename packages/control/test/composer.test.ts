// The composer's message as typed is the message sent: a DeltaMessage built from typed members encodes to the JSON
// of that MapResponse, and the DeltaEncoder's frames (plain, zstd whole, zstd cut around shared frames) decode to
// exactly that text. Then, in a live fleet, each session's message as the composer typed it is what its client got.
import t from 'tap';
import type { FilterRule } from '@headway/policy';
import type { MapResponse, Node, PeerChange, UserProfile, WireNode } from '@headway/core';
import { zstdDecompress } from '@headway/testkit';
import { machineKey, nodeKey } from '@headway/test-support';
import { DeltaMessage, sharedKey } from '../src/delta-message.js';
import { DeltaEncoder, type FanoutCounters } from '../src/delta-encoder.js';
import { encode, jsonArray, member } from '../src/map-json.js';
import { filterUpdate } from '../src/filter-chunks.js';
import { MapSession } from '../src/map-session.js';
import { setSharedFrameMin, wireBytes } from '../src/frames.js';
import { UNSHARED_KEY_LENGTH } from '../src/fanout-knobs.js';
import { Fleet, POLICIES } from './fleet.js';

const counters = (): FanoutCounters => ({ blockFrames: 0, partFrames: 0, upsertLists: 0, segmentedMessages: 0, deltas: 0 });

/** received is a session that keeps the decoded text of every message it is sent, and the messages as sent. */
function received(id: number, zstd: boolean) {
  const texts: string[] = [];
  const raw: unknown[] = [];
  const session = new MapSession(id, 106, zstd, (msg) => {
    raw.push(msg);
    const buf = wireBytes(msg);
    const body = buf.subarray(4, 4 + buf.readUInt32LE(0));
    texts.push((zstd ? zstdDecompress(body) : body).toString());
  }, () => undefined);
  return { session, texts, raw };
}

const peer = (id: number): WireNode => ({
  ID: id, StableID: String(id), Name: `peer${id}.example.`, User: 1, Key: `nodekey:${'a'.repeat(64)}`, Addresses: [`100.64.0.${id}/32`],
  AllowedIPs: [`100.64.0.${id}/32`], Hostinfo: { Hostname: `peer${id}`, OS: 'linux' }, MachineAuthorized: true, Online: true,
});
const rule = (n: number): FilterRule => ({
  SrcIPs: Array.from({ length: n }, (_, i) => `100.64.${i >> 8}.${i & 255}`), DstPorts: [{ IP: '*', Ports: { First: 22, Last: 22 } }],
});

/** sample is a message with every kind of part: its typed members, and the MapResponse they make. */
function sample(longFilter = UNSHARED_KEY_LENGTH) {
  const self: WireNode = { ...peer(1), Name: 'self.example.', Cap: 106 };
  const peers = Array.from({ length: 12 }, (_, i) => peer(10 + i));
  const patch: PeerChange = { NodeID: 30, Online: false, LastSeen: '2026-01-01T00:00:00.000Z' };
  const profile: UserProfile = { ID: 1, LoginName: 'alice@example.com', DisplayName: 'Alice' };
  const update = filterUpdate([], undefined, [rule(40), rule(3)]);
  const m = new DeltaMessage(longFilter);
  m.add('Node', encode(self));
  m.addFilter(update);
  m.add('SSHPolicy', encode({ rules: [] }));
  m.add('PeersRemoved', encode([5, 6]));
  const ids = peers.map((p) => p.ID);
  m.addShared('PeersChanged', sharedKey('PeersChanged', ids), member('PeersChanged', jsonArray(peers.map((p) => encode(p)))));
  m.add('UserProfiles', jsonArray([encode(profile)]));
  m.addShared('PeersChangedPatch', sharedKey('PeersChangedPatch', [30]), member('PeersChangedPatch', jsonArray([encode(patch)])));
  m.add('Domain', encode('example.com'));
  const expected: MapResponse = {
    Node: self, PacketFilters: JSON.parse(update.json!) as MapResponse['PacketFilters'], SSHPolicy: { rules: [] }, PeersRemoved: [5, 6],
    PeersChanged: peers, UserProfiles: [profile], PeersChangedPatch: [patch], Domain: 'example.com',
  };
  return { m, expected };
}

t.test('a message of typed members is the JSON of that MapResponse, its members in order', async (t) => {
  const { m, expected } = sample();
  const json = m.json();
  t.same(JSON.parse(json), expected);
  t.same(Object.keys(JSON.parse(json) as object), m.parts.map((p) => p.field), 'members in the order they were added');
  t.same(Object.keys(JSON.parse(json) as object), Object.keys(expected));
  t.ok(m.has('SSHPolicy') && !m.has('DERPMap'));
  t.ok(m.key(), 'a message of short parts is named by a key');
  t.equal(sample().m.key(), m.key(), 'equal messages, equal keys');
  t.notOk(sample(64).m.key(), 'a message holding a long filter update has none: only its session sends it');
  t.same(JSON.parse(sample(64).m.json()), expected, 'and its text is the same');
});

t.test('every encoding of a message decodes to its JSON; equal messages share one frame and shared parts one compression', async (t) => {
  const was = setSharedFrameMin(256);
  t.teardown(() => { setSharedFrameMin(was); });
  const c = counters();
  const encoder = new DeltaEncoder(c);
  const { m } = sample();
  const sessions = [received(1, false), received(2, false), received(3, true), received(4, true)];
  for (const s of sessions) encoder.send(s.session, m);
  for (const s of sessions) t.same(s.texts, [m.json()], `session ${s.session.nodeId} (${s.session.zstd ? 'zstd' : 'plain'}): the message's text`);
  t.equal(sessions[1]!.raw[0], sessions[0]!.raw[0], 'two plain sessions: one frame');
  t.equal(sessions[3]!.raw[0], sessions[2]!.raw[0], 'two zstd sessions: one frame');
  t.equal(c.segmentedMessages, 2, 'both zstd messages went out cut around their shared parts');
  t.equal(c.partFrames, 1, 'the PeersChanged list (past the shared-frame size) compressed once, as a frame of its own');
  t.equal(c.deltas, 4);

  // A long filter update: each session's message is its own, made for it, and still the same text.
  const own = sample(64).m;
  const alone = [received(5, false), received(6, false), received(7, true)];
  for (const s of alone) encoder.send(s.session, own);
  for (const s of alone) t.same(s.texts, [own.json()]);
  t.not(alone[1]!.raw[0], alone[0]!.raw[0], 'no frame kept for a message past the key limit');
});

t.test('in a flush, each session\'s message as the composer typed it is what its client received', async (t) => {
  const f = await Fleet.start(t, POLICIES[2]);
  const seen = new Map<number, string>();
  const send = DeltaEncoder.prototype.send;
  DeltaEncoder.prototype.send = function (s, m) {
    seen.set(s.nodeId, m.json());
    send.call(this, s, m);
  };
  t.teardown(() => { DeltaEncoder.prototype.send = send; });
  const [alice, bob] = f.users();
  const nodes: Node[] = [];
  for (let i = 0; i < 6; i++) {
    const n = await f.state.nodes.create({
      machineKey: machineKey(), nodeKey: nodeKey(), hostname: `n${i}`, userId: i < 3 ? alice!.id : i < 5 ? bob!.id : null,
      tags: i === 5 ? ['tag:web'] : [], availableRoutes: i === 4 ? ['10.2.0.0/24'] : [], registerMethod: 'authkey',
    });
    f.connect(n.id);
    nodes.push(n);
  }
  f.hub.flushNow();
  const changes: Array<[string, () => Promise<unknown>]> = [
    ['a rename', () => f.state.nodes.rename(nodes[0]!.id, 'renamed')],
    ['a tag change', () => f.state.nodes.setTags(nodes[1]!.id, ['tag:web'])],
    ['an endpoint patch', async () => { f.state.nodes.publishPatch(nodes[2]!.id, { endpoints: ['192.0.2.1:41641'] }); }],
    ['a route approval', () => f.state.nodes.approveRoutes(nodes[4]!.id, ['10.2.0.0/24'])],
    ['a policy change', async () => { f.policyText = POLICIES[3]; f.state.bus.publish({ type: 'policy-changed' }); }],
  ];
  let compared = 0;
  for (const [what, change] of changes) {
    seen.clear();
    await change();
    f.hub.flushNow();
    t.ok(seen.size > 0, `${what}: some sessions were sent a message`);
    for (const [id, json] of seen) {
      t.same(f.connected.get(id)!.client.last, JSON.parse(json), `${what}: node ${id} received the message composed for it`);
      compared++;
    }
  }
  t.ok(compared >= 10, `${compared} messages compared`);
});
