import t from 'tap';
import { CipherState, IkInitiator, IkResponder, keyPairFromPrivate, type NonceOrder } from '../src/index.js';

// Official cacophony test vector for Noise_IK_25519_ChaChaPoly_BLAKE2s (Noise spec little-endian nonces).
const hex = (s: string): Buffer => Buffer.from(s, 'hex');
const VECTOR = {
  prologue: hex('4a6f686e2047616c74'),
  initStatic: hex('e61ef9919cde45dd5f82166404bd08e38bceb5dfdfded0a34c8df7ed542214d1'),
  initEphemeral: hex('893e28b9dc6ca8d611ab664754b8ceb7bac5117349a4439a6b0569da977c464a'),
  initRemoteStatic: hex('31e0303fd6418d2f8c0e78b91f22e8caed0fbe48656dcf4767e4834f701b8f62'),
  respStatic: hex('4a3acbfdb163dec651dfa3194dece676d437029c62a408b4c5ea9114246e4893'),
  respEphemeral: hex('bbdb4cdbd309f1a1f2e1456967fe288cadd6f712d65dc7b7793d5e63da6b375b'),
  handshakeHash: hex('48f3cb8bc9319da4ba1e9933991b1c4ed4034f1f126a76d3a1fbcfd7f94248d4'),
  messages: [
    {
      payload: hex('4c756477696720766f6e204d69736573'),
      ciphertext: hex(
        'ca35def5ae56cec33dc2036731ab14896bc4c75dbb07a61f879f8e3afa4c79440b03ddc7aac5123d06a1b23b71670e32e76c28239a7ca4ac8f784de7e44c1adbfc6e83fef7352a58d9d56157400c0a737b1d171ce368229c7b752ac25b8faf4eca690f6d896f543be02c996ab2b86b76',
      ),
    },
    {
      payload: hex('4d757272617920526f746862617264'),
      ciphertext: hex('95ebc60d2b1fa672c1f46a8aa265ef51bfe38e7ccb39ec5be34069f144808843d9b5a8927f0ac9655ef76833bc7e5561f42e691ac8404efd6fbd6308b6a27c'),
    },
    { payload: hex('462e20412e20486179656b'), ciphertext: hex('2c256ed08fcd08c2980f954ee4beaccb61c9581340f5dd2fd1cf3b') },
    { payload: hex('4361726c204d656e676572'), ciphertext: hex('d6033f70eee20945c7c9dba304e397ee3b284ff5e00fd9efb095d3') },
    {
      payload: hex('4a65616e2d426170746973746520536179'),
      ciphertext: hex('a9c068ca5d8babf72560652d8e851adbfac35c8a66e810d560863173e96adf4cfe'),
    },
    {
      payload: hex('457567656e2042f6686d20766f6e2042617765726b'),
      ciphertext: hex('2a09d8f459e5927e40fdd2eddc99bdafb04e13a26f145cb5cfe9e6ba34c94331ebc17d5156'),
    },
  ],
};

function handshake(order: NonceOrder) {
  const initiator = new IkInitiator({
    prologue: VECTOR.prologue,
    staticKey: keyPairFromPrivate(VECTOR.initStatic),
    ephemeralPrivateKey: VECTOR.initEphemeral,
    remoteStaticPublicKey: VECTOR.initRemoteStatic,
    nonceOrder: order,
  });
  const responder = new IkResponder({
    prologue: VECTOR.prologue,
    staticKey: keyPairFromPrivate(VECTOR.respStatic),
    ephemeralPrivateKey: VECTOR.respEphemeral,
    nonceOrder: order,
  });
  const [m0, m1] = VECTOR.messages;
  const msg1 = initiator.writeMessage1(m0!.payload);
  const read1 = responder.readMessage1(msg1);
  const { message: msg2, keys: responderKeys } = responder.writeMessage2(m1!.payload);
  const { payload: payload2, keys: initiatorKeys } = initiator.readMessage2(msg2);
  return { msg1, read1, msg2, payload2, initiatorKeys, responderKeys };
}

t.test('cacophony vector: handshake messages and hash', async (t) => {
  const h = handshake('little');
  t.equal(h.msg1.toString('hex'), VECTOR.messages[0]!.ciphertext.toString('hex'), 'message 1 bytes');
  t.same(h.read1.payload, VECTOR.messages[0]!.payload, 'responder decrypts payload 1');
  t.same(h.read1.remoteStaticPublicKey, keyPairFromPrivate(VECTOR.initStatic).publicKey, 'responder learns initiator static');
  t.equal(h.msg2.toString('hex'), VECTOR.messages[1]!.ciphertext.toString('hex'), 'message 2 bytes');
  t.same(h.payload2, VECTOR.messages[1]!.payload, 'initiator decrypts payload 2');
  t.equal(h.initiatorKeys.handshakeHash.toString('hex'), VECTOR.handshakeHash.toString('hex'), 'initiator handshake hash');
  t.equal(h.responderKeys.handshakeHash.toString('hex'), VECTOR.handshakeHash.toString('hex'), 'responder handshake hash');
});

t.test('cacophony vector: transport messages in both directions (little-endian nonces)', async (t) => {
  const { initiatorKeys: i, responderKeys: r } = handshake('little');
  const m = VECTOR.messages;
  // Messages alternate initiator→responder, responder→initiator; n=1 checks the counter encoding.
  for (let idx = 2; idx < m.length; idx++) {
    const fromInitiator = idx % 2 === 0;
    const [sender, receiver] = fromInitiator ? [i.send, r.receive] : [r.send, i.receive];
    const sealed = sender.seal(m[idx]!.payload);
    t.equal(sealed.toString('hex'), m[idx]!.ciphertext.toString('hex'), `transport message ${idx} ciphertext`);
    t.same(receiver.open(sealed), m[idx]!.payload, `transport message ${idx} decrypts`);
  }
});

t.test('big-endian nonces (Tailscale) match the vector at n=0 and diverge from n=1', async (t) => {
  const { initiatorKeys: i, responderKeys: r } = handshake('big');
  const m = VECTOR.messages;
  t.equal(i.send.seal(m[2]!.payload).toString('hex'), m[2]!.ciphertext.toString('hex'), 'n=0 identical');
  t.equal(r.send.seal(m[3]!.payload).toString('hex'), m[3]!.ciphertext.toString('hex'), 'n=0 identical (responder)');
  const second = i.send.seal(m[4]!.payload);
  t.not(second.toString('hex'), m[4]!.ciphertext.toString('hex'), 'n=1 differs from the little-endian vector');
  r.receive.open(Buffer.from(m[2]!.ciphertext));
  t.same(r.receive.open(second), m[4]!.payload, 'big-endian peer decrypts n=1');
  const littleReceiver = handshake('little').responderKeys.receive;
  littleReceiver.open(Buffer.from(m[2]!.ciphertext));
  t.throws(() => littleReceiver.open(second), /authentication failed/, 'little-endian peer rejects big-endian n=1');
});

t.test('cipher state rejects tampering', async (t) => {
  const key = Buffer.alloc(32, 7);
  const a = new CipherState(key);
  const b = new CipherState(key);
  const sealed = a.seal(Buffer.from('hello'));
  sealed[0]! ^= 1;
  t.throws(() => b.open(sealed), /authentication failed/);
  t.throws(() => new CipherState(Buffer.alloc(31)), /32 bytes/);
});
