// A zstd session's full map sends its peers in blocks by node id (Mapper.fullMapMessage), each large block a frame
// compressed once and sent to every joiner holding the same peers in it. The message must decode to exactly the
// full map's text, joiners holding the same peers in a block must get the very same frame, and a block whose peers
// changed must be compressed again.
import t from 'tap';
import { MapFrameDecoder, zstdDecompress, zstdFrameLength } from '@headway/testkit';
import { Fleet, POLICIES } from './fleet.js';
import { machineKey, nodeKey } from '@headway/test-support';
import { PeerBlockFrames } from '../src/peer-blocks.js';
import { PEER_BLOCK_IDS, SHARED_FRAME_MIN } from '../src/fanout-knobs.js';
import { setSharedFrameMin, wireBytes } from '../src/frames.js';

type Json = Record<string, unknown>;

/** framesOf cuts a framed message's body into its zstd frames. */
function framesOf(message: Buffer): Buffer[] {
  const body = message.subarray(4);
  t.equal(message.readUInt32LE(0), body.length, 'the length prefix counts the body');
  const out: Buffer[] = [];
  for (let at = 0; at < body.length;) {
    const n = zstdFrameLength(body.subarray(at));
    if (!n) throw new Error(`no whole zstd frame at ${at}`);
    out.push(body.subarray(at, at + n));
    at += n;
  }
  return out;
}

const withoutTime = (m: Json): Json => ({ ...m, ControlTime: '' });

t.test('a full map in peer blocks decodes to the full map, and joiners share the blocks they hold alike', async (t) => {
  const f = await Fleet.start(t, POLICIES[1]); // everyone sees everyone
  // The server's own bound (the fleet frames every block); Fleet's teardown puts back what was in force before it.
  setSharedFrameMin(SHARED_FRAME_MIN);
  const [alice] = f.users();
  const nodes = [];
  for (let i = 0; i < 2 * PEER_BLOCK_IDS + 40; i++) {
    nodes.push(await f.state.nodes.create({ machineKey: machineKey(), nodeKey: nodeKey(), hostname: `n${i}`, userId: alice!.id, registerMethod: 'authkey' }));
  }
  f.hub.flushNow();
  const blocks = new Set(nodes.map((n) => Math.floor(n.id / PEER_BLOCK_IDS)));
  t.ok(blocks.size >= 3, `the nodes span ${blocks.size} blocks`);
  const mapper = f.mapper;
  const last = nodes.at(-1)!, before = nodes.at(-2)!;

  const message = wireBytes(mapper.fullMapMessage(last, 106, true));
  const frames = framesOf(message);
  t.ok(frames.length >= 2 * blocks.size, `the peers came in block frames between own frames (${frames.length} frames)`);
  const whole = JSON.parse(mapper.fullMap(last, 106)) as Json;
  t.same(withoutTime(JSON.parse(zstdDecompress(message.subarray(4)).toString()) as Json), withoutTime(whole), 'the frames hold the full map\'s text, in order');
  const decoded = new MapFrameDecoder().push(message)[0] as Json;
  t.same(withoutTime(decoded), withoutTime(whole), 'the load generator\'s decoder reads it as the same message');
  t.equal((decoded.Peers as unknown[]).length, nodes.length - 1);
  t.equal(mapper.peerBlocks.misses, blocks.size, 'each block compressed once');

  // Another joiner of the same last block: every block but that one is the very same frame.
  const hitsBefore = mapper.peerBlocks.hits;
  const other = framesOf(wireBytes(mapper.fullMapMessage(before, 106, true)));
  const shared = other.filter((x) => frames.some((y) => y.equals(x)) && x.length > 64);
  t.equal(mapper.peerBlocks.hits - hitsBefore, blocks.size - 1, 'the blocks not holding either joiner came from the cache');
  t.ok(shared.length >= blocks.size - 1, `and went out byte for byte the same (${shared.length} large frames in common)`);

  // A peer of the first block renamed: that block is compressed again with the new name; the others are kept.
  const renamed = nodes[3]!;
  await f.state.nodes.rename(renamed.id, 'renamed-peer');
  f.hub.flushNow();
  const misses = mapper.peerBlocks.misses;
  const after = wireBytes(mapper.fullMapMessage(last, 106, true));
  t.equal(mapper.peerBlocks.misses - misses, 1, 'only the renamed peer\'s block was compressed again');
  const peers = (new MapFrameDecoder().push(after)[0] as { Peers: Array<{ ID: number; Name: string }> }).Peers;
  t.match(peers.find((p) => p.ID === renamed.id)?.Name, /^renamed-peer\./, 'the new block holds the new name');
  t.same(withoutTime(JSON.parse(zstdDecompress(after.subarray(4)).toString()) as Json), withoutTime(JSON.parse(mapper.fullMap(last, 106)) as Json));

  // A session without zstd gets the plain text, one body.
  const plain = wireBytes(mapper.fullMapMessage(last, 106, false));
  t.same(withoutTime(JSON.parse(plain.subarray(4).toString()) as Json), withoutTime(JSON.parse(mapper.fullMap(last, 106)) as Json), 'without zstd: the full map as plain JSON');
});

t.test('small blocks stay in the joiner\'s own frames', async (t) => {
  const f = await Fleet.start(t, POLICIES[1]);
  setSharedFrameMin(1 << 30);
  const [alice] = f.users();
  const nodes = [];
  for (let i = 0; i < 5; i++) nodes.push(await f.state.nodes.create({ machineKey: machineKey(), nodeKey: nodeKey(), hostname: `s${i}`, userId: alice!.id, registerMethod: 'authkey' }));
  f.hub.flushNow();
  const misses = f.mapper.peerBlocks.misses;
  const message = wireBytes(f.mapper.fullMapMessage(nodes[0]!, 106, true));
  t.equal(framesOf(message).length, 1, 'one frame: no block was large enough');
  t.equal(f.mapper.peerBlocks.misses, misses, 'nothing was put in the cache');
  t.equal((new MapFrameDecoder().push(message)[0] as { Peers: unknown[] }).Peers.length, 4);
});

t.test('the block cache keeps to its size and empties when no full map asks for a while', async (t) => {
  const bufs = (tag: string, n: number) => Array.from({ length: n }, (_, i) => Buffer.from(JSON.stringify({ ID: i, Name: `${tag}-${i}`, Key: 'k'.repeat(200) })));
  const a = bufs('a', 30), b = bufs('b', 30), c = bufs('c', 30);
  // Peers 0-29, their texts numbered (Mapper.peerBytesOf) as ids; b's texts are later versions of theirs.
  const ids = a.map((_, i) => i);
  const later = a.map((_, i) => 100 + i);
  // Room for two frames of this size, not three.
  const one = new PeerBlockFrames().frameOf(0, ids, ids, a).length;
  const cache = new PeerBlockFrames(Math.floor(2.5 * one), 50);
  const fa = cache.frameOf(0, ids, ids, a);
  t.equal(cache.frameOf(0, ids, ids, a), fa, 'the same peers: the same frame');
  t.equal(cache.hits, 1);
  t.not(cache.frameOf(0, ids, later, b), fa, 'the same peers with newer texts: another frame');
  t.equal(cache.size, 1, 'which replaced the first');
  cache.frameOf(1, ids, later.map((x) => x + 100), c);
  cache.frameOf(2, ids, ids, a);
  t.equal(cache.size, 2, 'the oldest frame dropped past the size bound');
  t.equal(cache.frameOf(2, ids, ids, a), cache.frameOf(2, ids, ids, a), 'the newest kept');
  await new Promise((r) => setTimeout(r, 150));
  t.equal(cache.size, 0, 'emptied once idle');
  t.same(JSON.parse(`[${zstdDecompress(Buffer.from(cache.frameOf(0, ids, ids, a))).toString()}]`), a.map((x) => JSON.parse(x.toString())), 'a frame holds its peers\' texts, comma-separated');
});
