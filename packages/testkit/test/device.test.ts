import t, { type Test } from 'tap';
import { createServer } from 'node:http';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { createServer as createHttp2Server, type ServerHttp2Stream } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { formatKey, generateKeyPair, handleTs2021Upgrade } from '@headway/noise';
import {
  encodeMapFrame,
  LOGOUT_EXPIRY,
  TestDevice,
  ZERO_TIME,
  type MapRequest,
  type MapResponse,
  type Node,
  type RegisterRequest,
} from '../src/index.js';

/** FakeControl is a minimal control server: the real noise upgrade + HTTP/2, with scripted map frames. */
interface FakeControl {
  url: string;
  registers: Array<{ machineKey: string; body: RegisterRequest }>;
  maps: Array<{ machineKey: string; body: MapRequest }>;
  /** mapStreams holds open streaming polls; tests write frames into them. */
  mapStreams: ServerHttp2Stream[];
  nextMapStream(): Promise<ServerHttp2Stream>;
}

async function startFakeControl(t: Test): Promise<FakeControl> {
  const control = generateKeyPair();
  const fake: FakeControl = {
    url: '',
    registers: [],
    maps: [],
    mapStreams: [],
    nextMapStream: () =>
      new Promise((resolve) => {
        const have = fake.mapStreams.length;
        const poll = setInterval(() => {
          if (fake.mapStreams.length > have) {
            clearInterval(poll);
            resolve(fake.mapStreams[fake.mapStreams.length - 1]!);
          }
        }, 5);
      }),
  };
  const http2Servers: Array<ReturnType<typeof createHttp2Server>> = [];
  const server = createServer((req, res) => {
    if (req.url?.startsWith('/key?v=')) {
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify({ legacyPublicKey: 'mkey:' + '0'.repeat(64), publicKey: formatKey('mkey', control.publicKey) }));
      return;
    }
    res.statusCode = 404;
    res.end('not found');
  });
  server.on('upgrade', (req, socket, head) => {
    handleTs2021Upgrade(req, socket, head, {
      privateKey: control.privateKey,
      earlyPayload: () => ({ nodeKeyChallenge: 'chalpub:' + '11'.repeat(32) }),
      onConnection: (conn, info) => {
        // One HTTP/2 server per Noise connection, so every handler knows the authenticated machine key.
        const h2 = createHttp2Server();
        http2Servers.push(h2);
        h2.on('stream', (stream, headers) => {
          const chunks: Buffer[] = [];
          stream.on('data', (c: Buffer) => chunks.push(c));
          stream.on('end', () => {
            const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
            const path = headers[':path'];
            if (path === '/machine/register') {
              const reg = body as unknown as RegisterRequest;
              fake.registers.push({ machineKey: info.machineKey, body: reg });
              const reply =
                reg.Auth?.AuthKey === 'bad-key'
                  ? { Error: 'invalid pre auth key' }
                  : reg.Expiry === LOGOUT_EXPIRY
                    ? { NodeKeyExpired: true, MachineAuthorized: false }
                    : { User: { ID: 1, DisplayName: 'Alice' }, Login: { ID: 1, LoginName: 'alice' }, MachineAuthorized: true, NodeKeyExpired: false, AuthURL: '', Error: '' };
              stream.respond({ ':status': 200, 'content-type': 'application/json' });
              stream.end(JSON.stringify(reply));
            } else if (path === '/machine/map') {
              const map = body as unknown as MapRequest;
              fake.maps.push({ machineKey: info.machineKey, body: map });
              stream.respond({ ':status': 200 });
              if (map.Stream) fake.mapStreams.push(stream);
              else stream.end();
            } else {
              stream.respond({ ':status': 501 });
              stream.end();
            }
          });
        });
        h2.emit('connection', conn);
      },
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  fake.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  t.teardown(async () => {
    for (const s of fake.mapStreams) if (!s.closed) s.close();
    for (const h2 of http2Servers) h2.close();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return fake;
}

const peer = (id: number, extra: Partial<Node> = {}): Node => ({
  ID: id,
  StableID: String(id),
  Name: `peer${id}.ts.example.com.`,
  Key: formatKey('nodekey', Buffer.alloc(32, id)),
  DiscoKey: formatKey('discokey', Buffer.alloc(32, id + 100)),
  Addresses: [`100.64.0.${id}/32`],
  HomeDERP: 999,
  Online: false,
  ...extra,
});

const allowAll = [{ SrcIPs: ['*'], DstPorts: [{ IP: '*', Ports: { First: 0, Last: 65535 } }] }];

function send(stream: ServerHttp2Stream, msg: MapResponse): void {
  stream.write(encodeMapFrame(msg));
}

t.test('register, streamed map deltas, lite update, key rotation and logout', async (t) => {
  const fake = await startFakeControl(t);
  const device = new TestDevice({ serverUrl: fake.url, hostname: 'laptop', os: 'linux' });
  t.teardown(() => device.close());
  await device.connect();
  t.same(device.earlyPayload, { nodeKeyChallenge: 'chalpub:' + '11'.repeat(32) });

  const reg = await device.register({ authKey: 'hskey-auth-good', tags: ['tag:ci'] });
  t.equal(reg.MachineAuthorized, true);
  t.equal(reg.User?.ID, 1);
  const sent = fake.registers[0]!;
  t.equal(sent.machineKey, device.machineKeyText, 'server authenticated the device machine key');
  t.equal(sent.body.Version, 130);
  t.equal(sent.body.NodeKey, device.nodeKeyText);
  t.equal(sent.body.OldNodeKey, 'nodekey:' + '0'.repeat(64));
  t.same(sent.body.Auth, { AuthKey: 'hskey-auth-good' });
  t.equal(sent.body.Expiry, ZERO_TIME);
  t.equal(sent.body.Followup, '');
  t.equal(sent.body.Ephemeral, false);
  t.equal(sent.body.Hostinfo.Hostname, 'laptop');
  t.equal(sent.body.Hostinfo.OS, 'linux');
  t.same(sent.body.Hostinfo.RequestTags, ['tag:ci']);

  const rejected = await device.register({ authKey: 'bad-key' });
  t.equal(rejected.Error, 'invalid pre auth key', 'Error in a 200 body is returned, not thrown');

  // Full map.
  const nextStream = fake.nextMapStream();
  const firstPromise = device.startMap({ endpoints: ['192.0.2.1:41641'] });
  const mapStream = await nextStream;
  const self: Node = { ID: 1, Name: 'laptop.ts.example.com.', Key: device.nodeKeyText, MachineAuthorized: true, Addresses: ['100.64.0.1/32'] };
  send(mapStream, {
    Node: self,
    Peers: [peer(2), peer(3)],
    DERPMap: { Regions: { '999': { RegionID: 999, RegionCode: 'headway', Nodes: [{ Name: '999', RegionID: 999, HostName: '127.0.0.1' }] } } },
    DNSConfig: { Proxied: true, Domains: ['ts.example.com'] },
    PacketFilter: allowAll,
    UserProfiles: [{ ID: 1, LoginName: 'alice', DisplayName: 'Alice' }],
    Domain: 'ts.example.com',
    ControlTime: '2026-01-01T00:00:00Z',
  });
  const first = await firstPromise;
  t.same(first.Node, self);
  const streamReq = fake.maps[0]!.body;
  t.match(streamReq, { Version: 130, Compress: 'zstd', KeepAlive: true, Stream: true, OmitPeers: false, NodeKey: device.nodeKeyText, DiscoKey: device.discoKeyText, Endpoints: ['192.0.2.1:41641'] });
  t.same(device.netmap.self, self);
  t.same([...device.netmap.peers.keys()].sort(), [2, 3]);
  t.same(device.netmap.packetFilter, allowAll);
  t.equal(device.netmap.dnsConfig?.Proxied, true);
  t.equal(device.netmap.derpMap?.Regions?.['999']?.RegionCode, 'headway');
  t.equal(device.netmap.userProfiles.get(1)?.LoginName, 'alice');
  t.equal(device.netmap.domain, 'ts.example.com');
  t.equal(device.netmap.messages, 1);

  // PeersChanged: whole-node upsert, no field merging. The frame is split across two writes on purpose.
  const frame = encodeMapFrame({ PeersChanged: [peer(4), { ID: 2, Name: 'renamed.ts.example.com.' }], UserProfiles: [{ ID: 2, LoginName: 'bob' }] });
  mapStream.write(frame.subarray(0, 7));
  setTimeout(() => mapStream.write(frame.subarray(7)), 20);
  await device.waitFor((nm) => nm.peers.has(4));
  t.same(device.netmap.peers.get(2), { ID: 2, Name: 'renamed.ts.example.com.' }, 'PeersChanged replaces the whole node');
  t.equal(device.netmap.userProfiles.size, 2, 'UserProfiles are additive');
  t.equal(device.netmap.packetFilter.length, 1, 'absent PacketFilter leaves the filter unchanged');

  // PeersChangedPatch: only present fields change; unknown node IDs are ignored.
  const newKey = formatKey('nodekey', Buffer.alloc(32, 0x33));
  send(mapStream, {
    PeersChangedPatch: [
      { NodeID: 3, Online: true, Endpoints: ['198.51.100.3:41641'], DERPRegion: 901, Key: newKey, LastSeen: '2026-01-01T00:01:00Z', CapMap: { 'drive:share': [] } },
      { NodeID: 99, Online: true },
    ],
  });
  await device.waitFor((nm) => nm.peers.get(3)?.Online === true);
  const p3 = device.netmap.peers.get(3)!;
  t.same(p3.Endpoints, ['198.51.100.3:41641']);
  t.equal(p3.HomeDERP, 901);
  t.equal(p3.Key, newKey);
  t.equal(p3.LastSeen, '2026-01-01T00:01:00Z');
  t.same(p3.CapMap, { 'drive:share': [] });
  t.equal(p3.Name, 'peer3.ts.example.com.', 'untouched fields survive a patch');
  t.equal(p3.DiscoKey, peer(3).DiscoKey);
  t.notOk(device.netmap.peers.has(99), 'patch for an unknown peer is ignored');

  // PeersRemoved.
  send(mapStream, { PeersRemoved: [2] });
  await device.waitFor((nm) => !nm.peers.has(2));
  t.same([...device.netmap.peers.keys()].sort(), [3, 4]);

  // KeepAlive: counted, nothing else applied.
  const messagesBefore = device.netmap.messages;
  send(mapStream, { KeepAlive: true });
  await device.waitFor((nm) => nm.keepAlives === 1);
  t.equal(device.netmap.messages, messagesBefore, 'keep-alive is not a netmap update');
  t.equal(device.netmap.peers.size, 2);

  // Named packet filters are concatenated in name order; "*": null clears them all first.
  const extra = [{ SrcIPs: ['100.64.0.4'], DstPorts: [{ IP: '*', Ports: { First: 22, Last: 22 } }] }];
  send(mapStream, { PacketFilters: { zz: extra } });
  await device.waitFor((nm) => nm.packetFilter.length === 2);
  t.same(device.netmap.packetFilter, [...allowAll, ...extra]);
  send(mapStream, { PacketFilters: { '*': null, only: extra } });
  await device.waitFor((nm) => nm.packetFilters.size === 1);
  t.same(device.netmap.packetFilter, extra);

  // A non-empty Peers replaces everything and pre-empts other peer deltas in the same message.
  send(mapStream, { Peers: [peer(5)], PeersRemoved: [5], PeersChanged: [peer(6)] });
  await device.waitFor((nm) => nm.peers.has(5));
  t.same([...device.netmap.peers.keys()], [5]);

  // Lite update: Stream false + OmitPeers true, answered with 200 and no body.
  const disco = generateKeyPair();
  await device.liteUpdate({ endpoints: ['203.0.113.9:41641'], hostinfo: { OSVersion: '6.1' }, discoKey: disco });
  const lite = fake.maps[fake.maps.length - 1]!.body;
  t.match(lite, { Stream: false, OmitPeers: true, Endpoints: ['203.0.113.9:41641'], DiscoKey: formatKey('discokey', disco.publicKey) });
  t.equal(lite.Hostinfo.OSVersion, '6.1');
  t.equal(lite.Hostinfo.Hostname, 'laptop');

  // Key rotation sends the previous key as OldNodeKey.
  const oldKey = device.nodeKeyText;
  await device.rotateNodeKey({ authKey: 'hskey-auth-good' });
  const rotation = fake.registers[fake.registers.length - 1]!.body;
  t.equal(rotation.OldNodeKey, oldKey);
  t.not(rotation.NodeKey, oldKey);
  t.equal(rotation.NodeKey, device.nodeKeyText);

  // The server ending the stream settles mapDone.
  mapStream.end();
  await device.mapDone;
  t.pass('map stream ended cleanly');

  const out = await device.logout();
  t.equal(out.NodeKeyExpired, true);
  t.equal(fake.registers[fake.registers.length - 1]!.body.Expiry, LOGOUT_EXPIRY);
});

t.test('a first MapResponse without Node is refused like tailscaled does', async (t) => {
  const fake = await startFakeControl(t);
  const device = new TestDevice({ serverUrl: fake.url, hostname: 'desk' });
  t.teardown(() => device.close());
  await device.connect();
  const nextStream = fake.nextMapStream();
  const started = device.startMap();
  send(await nextStream, { Peers: [peer(2)] });
  await t.rejects(started, /initial MapResponse lacked node/);
});

t.test('an open map stream does not keep its first MapResponse alive', async (t) => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const fake = await startFakeControl(t);
  const device = new TestDevice({ serverUrl: fake.url, hostname: 'desk' });
  t.teardown(() => device.close());
  await device.connect();
  const nextStream = fake.nextMapStream();
  let stream!: ServerHttp2Stream;
  // Large enough (random keys, over 16 KiB compressed) that the decoder does not keep it among the small messages
  // devices share (zstd.ts), as a first map of a real tailnet is.
  const peers = Array.from({ length: 600 }, (_, k) => peer(k + 2, { Key: formatKey('nodekey', generateKeyPair().publicKey), DiscoKey: formatKey('discokey', generateKeyPair().publicKey) }));
  // Only a weak reference to the first message (and its promise) leaves this block: the caller has dropped it.
  const first = await (async () => {
    const started = device.startMap();
    stream = await nextStream;
    send(stream, { Node: peer(1), Peers: peers, PacketFilter: allowAll });
    return new WeakRef(await started);
  })();
  t.ok(first.deref()?.Node, 'the first message was delivered');
  // A weak reference holds until the job that read it ends: collect from later macrotasks.
  for (let i = 0; i < 5 && first.deref(); i++) {
    await new Promise((r) => setTimeout(r, 10));
    gc();
  }
  t.equal(first.deref(), undefined, 'the first MapResponse was collected while the stream stays open');
  t.equal(device.netmap.peers.size, 600, 'the netmap still holds what the message brought');
  send(stream, { PeersRemoved: [3] });
  await device.waitFor((nm) => nm.peers.size === 599, 2000);
  t.notOk(device.netmap.peers.has(3), 'the stream keeps applying messages');
});

t.test('waitFor times out with a clear error', async (t) => {
  const fake = await startFakeControl(t);
  const device = new TestDevice({ serverUrl: fake.url, hostname: 'idle' });
  t.teardown(() => device.close());
  await device.connect();
  const nextStream = fake.nextMapStream();
  const started = device.startMap();
  send(await nextStream, { Node: { ID: 7 } });
  await started;
  await t.rejects(device.waitFor((nm) => nm.peers.size > 0, 50), /idle: netmap condition not met within 50 ms/);
});

t.test('using a device before connect() names the problem', async (t) => {
  const device = new TestDevice({ serverUrl: 'http://127.0.0.1:1', hostname: 'nope' });
  await t.rejects(device.register(), /nope: not connected; call connect\(\) first/);
});
