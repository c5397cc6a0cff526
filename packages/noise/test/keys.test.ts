import t from 'tap';
import { createPrivateKey } from 'node:crypto';
import {
  acceptInitiation,
  formatKey,
  generateKeyPair,
  isZeroKey,
  parseDiscoKey,
  parseKey,
  parseMachineKey,
  parseNodeKey,
  parsePrivateKey,
  publicFromPrivate,
  startClientHandshake,
  x25519,
  ZERO_KEY,
} from '../src/index.js';

t.test('RFC 7748 X25519 test vector', async (t) => {
  const alicePriv = Buffer.from('77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a', 'hex');
  const bobPriv = Buffer.from('5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb', 'hex');
  t.equal(publicFromPrivate(alicePriv).toString('hex'), '8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a');
  t.equal(publicFromPrivate(bobPriv).toString('hex'), 'de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f');
  const shared = '4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742';
  t.equal(x25519(alicePriv, publicFromPrivate(bobPriv)).toString('hex'), shared);
  t.equal(x25519(bobPriv, publicFromPrivate(alicePriv)).toString('hex'), shared);
});

t.test('generateKeyPair yields consistent distinct pairs', async (t) => {
  const a = generateKeyPair();
  const b = generateKeyPair();
  t.equal(a.privateKey.length, 32);
  t.same(publicFromPrivate(a.privateKey), a.publicKey);
  t.not(a.publicKey.toString('hex'), b.publicKey.toString('hex'));
  t.same(x25519(a.privateKey, b.publicKey), x25519(b.privateKey, a.publicKey));
  t.throws(() => x25519(a.privateKey, ZERO_KEY), /all-zero/);
});

t.test('text forms round-trip and parse strictly', async (t) => {
  const { publicKey, privateKey } = generateKeyPair();
  const text = formatKey('mkey', publicKey);
  t.match(text, /^mkey:[0-9a-f]{64}$/);
  t.same(parseMachineKey(text), publicKey);
  t.same(parseNodeKey(formatKey('nodekey', publicKey)), publicKey);
  t.same(parseDiscoKey(formatKey('discokey', publicKey)), publicKey);
  t.same(parsePrivateKey(formatKey('privkey', privateKey)), privateKey);
  t.same(parseKey('mkey', text.toUpperCase().replace('MKEY', 'mkey')), publicKey, 'upper-case hex accepted');
  t.throws(() => parseMachineKey(formatKey('nodekey', publicKey)), /expected "mkey:<64 hex chars>", got prefix "nodekey:"/);
  t.throws(() => parseNodeKey(publicKey.toString('hex')), /got no prefix/);
  t.throws(() => parseNodeKey('nodekey:abcd'), /expected 64 hex chars .* got 4 chars/);
  t.throws(() => parseNodeKey('nodekey:' + 'zz'.repeat(32)), /non-hex/);
  t.throws(() => formatKey('mkey', Buffer.alloc(31)), /32 raw bytes, got 31 bytes/);
  t.ok(isZeroKey(parseMachineKey('mkey:' + '0'.repeat(64))));
});

t.test('an initiation with a low-order ephemeral key is refused, and the next handshake and key import go through', async (t) => {
  const control = generateKeyPair();
  const machine = generateKeyPair();
  const start = () => startClientHandshake({ machinePrivateKey: machine.privateKey, controlPublicKey: control.publicKey, capabilityVersion: 130 });
  // The ephemeral public key follows the 5-byte header (version, type, length).
  const der = Buffer.concat([Buffer.from('302e020100300506032b656e04220420', 'hex'), generateKeyPair().privateKey]);
  for (const point of [ZERO_KEY, Buffer.from('e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800', 'hex')]) {
    const hostile = Buffer.from(start().initiation);
    point.copy(hostile, 5);
    t.throws(() => acceptInitiation({ controlPrivateKey: control.privateKey, initiation: hostile }), /all-zero|did not authenticate|key agreement/, 'refused');
    // A refusal must not leave OpenSSL's error on the thread's queue (the addon): node:crypto's next import would
    // throw it.
    t.doesNotThrow(() => createPrivateKey({ key: der, format: 'der', type: 'pkcs8' }), 'node:crypto imports a key next');
    const hs = start();
    const accepted = acceptInitiation({ controlPrivateKey: control.privateKey, initiation: hs.initiation });
    const keys = hs.finish(accepted.response);
    t.ok(keys.handshakeHash.equals(accepted.keys.handshakeHash), 'the next handshake completes');
  }
});
