import t from 'tap';
import { createSocket, type Socket } from 'node:dgram';
import { buildBindingRequest, buildBindingResponse, crc32, parseBindingRequest, parseBindingResponse, StunServer } from '../src/stun.js';

// RFC 5769 §2.1 sample request (with SOFTWARE, PRIORITY, ICE-CONTROLLED, USERNAME, MESSAGE-INTEGRITY, FINGERPRINT).
const RFC5769_REQUEST = Buffer.from(
  '000100582112a442b7e7a701bc34d686fa87dfae802200105354554e20746573742063' +
    '6c69656e74002400046e0001ff80290008932ff9b151263b36000600096576746a3a68' +
    '367659202020000800149aeaa70cbfd8cb56781ef2b5b2d3f249c1b571a280280004e57a3bcf',
  'hex',
);
const RFC5769_TXID = Buffer.from('b7e7a701bc34d686fa87dfae', 'hex');

t.test('codec: crc32, RFC 5769 vectors, tailscale-style request', async (t) => {
  t.equal(crc32(Buffer.from('123456789')), 0xcbf43926);
  t.same(parseBindingRequest(RFC5769_REQUEST), RFC5769_TXID, 'RFC 5769 request parses with a valid FINGERPRINT');
  const tampered = Buffer.from(RFC5769_REQUEST);
  tampered[30] ^= 1;
  t.equal(parseBindingRequest(tampered), null, 'a flipped bit breaks the FINGERPRINT');
  // RFC 5769 §2.2/2.3: 192.0.2.1:32853 XORs to 0001 a147 e112a643.
  const resp = buildBindingResponse(RFC5769_TXID, '192.0.2.1', 32853);
  t.equal(resp.subarray(20).toString('hex'), '0020000800' + '01a147e112a643');
  t.same(parseBindingResponse(resp), { transactionId: RFC5769_TXID, address: '192.0.2.1', port: 32853, family: 'IPv4' });
  const v6 = parseBindingResponse(buildBindingResponse(RFC5769_TXID, '2001:db8:1234:5678:11:2233:4455:6677', 32853));
  t.equal(v6?.address, '2001:db8:1234:5678:11:2233:4455:6677');
  t.equal(parseBindingResponse(buildBindingResponse(RFC5769_TXID, '::1', 9))?.address, '::1');
  const req = buildBindingRequest(RFC5769_TXID);
  t.same(parseBindingRequest(req), RFC5769_TXID);
});

async function exchange(socket: Socket, packet: Buffer, port: number, host: string, waitMs = 1000): Promise<Buffer | null> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      socket.off('message', onMessage);
      resolve(null);
    }, waitMs);
    const onMessage = (msg: Buffer): void => {
      clearTimeout(timer);
      socket.off('message', onMessage);
      resolve(msg);
    };
    socket.on('message', onMessage);
    socket.send(packet, port, host);
  });
}

async function bound(type: 'udp4' | 'udp6', host: string): Promise<Socket> {
  const s = createSocket(type);
  await new Promise<void>((resolve, reject) => {
    s.once('error', reject);
    s.bind(0, host, () => resolve());
  });
  return s;
}

t.test('IPv4 binding request gets our address back; malformed packets are ignored', async (t) => {
  const stun = new StunServer();
  const { port, address } = await stun.listen({ host: '127.0.0.1', port: 0 });
  t.equal(address, '127.0.0.1');
  t.same(stun.address(), { address: '127.0.0.1', port });
  const client = await bound('udp4', '127.0.0.1');
  t.teardown(async () => {
    client.close();
    await stun.close();
  });
  const txid = Buffer.from('0102030405060708090a0b0c', 'hex');
  const reply = await exchange(client, buildBindingRequest(txid), port, '127.0.0.1');
  t.ok(reply, 'got a reply');
  const mapped = parseBindingResponse(reply!);
  t.same(mapped, { transactionId: txid, address: '127.0.0.1', port: client.address().port, family: 'IPv4' });

  const good = buildBindingRequest(txid);
  const badFingerprint = Buffer.from(good);
  badFingerprint[badFingerprint.length - 1] ^= 0xff;
  const badCookie = Buffer.from(good);
  badCookie[5] = 0;
  const notBinding = Buffer.from(good);
  notBinding[1] = 0x02;
  const lengthLies = Buffer.from(good);
  lengthLies.writeUInt16BE(100, 2);
  const truncatedAttr = Buffer.from(good.subarray(0, 26));
  truncatedAttr.writeUInt16BE(6, 2);
  const malformed: [string, Buffer][] = [
    ['too short', Buffer.from('hi')],
    ['bad fingerprint', badFingerprint],
    ['bad magic cookie', badCookie],
    ['not a binding request', notBinding],
    ['length field disagrees', lengthLies],
    ['truncated attribute', truncatedAttr],
    ['random bytes', Buffer.alloc(64, 0x41)],
  ];
  for (const [name, packet] of malformed) {
    t.equal(await exchange(client, packet, port, '127.0.0.1', 100), null, `${name}: no reply`);
  }
  t.equal(stun.packetsIgnored, malformed.length);

  // A plain RFC 5389 request without SOFTWARE or FINGERPRINT is still answered.
  const bare = Buffer.alloc(20);
  bare.writeUInt16BE(1, 0);
  Buffer.from('2112a442', 'hex').copy(bare, 4);
  txid.copy(bare, 8);
  const bareReply = await exchange(client, bare, port, '127.0.0.1');
  t.equal(parseBindingResponse(bareReply!)?.port, client.address().port);
  t.equal(stun.requestsAnswered, 2);
});

t.test('IPv6 binding request on ::1', async (t) => {
  const probe = createSocket('udp6');
  const v6ok = await new Promise<boolean>((resolve) => {
    probe.once('error', () => resolve(false));
    probe.bind(0, '::1', () => resolve(true));
  });
  probe.close();
  if (!v6ok) {
    t.comment('skip: ::1 is not available here');
    return;
  }
  const stun = new StunServer();
  const { port } = await stun.listen({ host: '::1', port: 0 });
  const client = await bound('udp6', '::1');
  t.teardown(async () => {
    client.close();
    await stun.close();
  });
  const reply = await exchange(client, buildBindingRequest(), port, '::1');
  const mapped = parseBindingResponse(reply!);
  t.equal(mapped?.family, 'IPv6');
  t.equal(mapped?.address, '::1');
  t.equal(mapped?.port, client.address().port);
});

t.test('listen validates its arguments', async (t) => {
  const stun = new StunServer();
  await t.rejects(stun.listen({ host: 'localhost', port: 0 }), /host must be an IP address/);
  await t.rejects(stun.listen({ host: '127.0.0.1', port: 70000 }), /port must be 0-65535/);
  t.throws(() => stun.address(), /not listening/);
});
