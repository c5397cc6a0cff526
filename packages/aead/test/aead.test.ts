import t from 'tap';
import { createCipheriv, createDecipheriv, createPrivateKey, createPublicKey, diffieHellman, generateKeyPairSync, randomBytes } from 'node:crypto';
import { ADDON_PATH, loadAead } from '../src/index.js';

const loaded = loadAead();
const unavailable = 'unavailable' in loaded ? loaded.unavailable : undefined;
// CI builds the addon (scripts/build-sqlite.sh): there it must load. (@headway/noise's aead.test.ts checks the
// bytes against node:crypto and libsodium.)
const skip = unavailable && process.env.CI !== 'true' ? `${unavailable} (bash scripts/build-sqlite.sh builds it)` : false;

t.test('the addon loads', { skip }, async (t) => {
  t.equal(unavailable, undefined, `loads from ${ADDON_PATH}`);
  if (!('unavailable' in loaded)) t.equal(loaded.max, 4096, 'takes records of a Noise transport record\'s size');
});

t.test('a wrong argument throws a TypeError naming it, and writes nothing', { skip: skip || unavailable !== undefined }, async (t) => {
  if ('unavailable' in loaded) return;
  const key = randomBytes(32), nonce = randomBytes(12), text = randomBytes(40);
  const out = Buffer.alloc(100, 9);
  const cases: Array<[string, () => unknown, RegExp]> = [
    ['short key', () => loaded.seal(key.subarray(1), nonce, text, out, 0), /seal: needs a 32-byte key/],
    ['key not bytes', () => loaded.seal('k'.repeat(32) as never, nonce, text, out, 0), /32-byte key/],
    ['long nonce', () => loaded.open(key, randomBytes(13), Buffer.alloc(40), out, 0), /open: needs a 12-byte nonce/],
    ['plaintext too long', () => loaded.seal(key, nonce, Buffer.alloc(4097), Buffer.alloc(5000), 0), /at most 4096 bytes/],
    ['sealed too short', () => loaded.open(key, nonce, Buffer.alloc(15), out, 0), /sealed record of 16 to 4112 bytes/],
    ['no room past the offset', () => loaded.seal(key, nonce, text, out, 45), /room in out from offset/],
    ['negative offset', () => loaded.seal(key, nonce, text, out, -1), /offset/],
    ['missing arguments', () => (loaded.seal as (...a: unknown[]) => number)(key, nonce, text), /five arguments/],
    ['ad not bytes', () => loaded.seal(key, nonce, text, out, 0, 'ad' as never), /seal: needs ad as a Uint8Array/],
    ['x25519 key not a key', () => loaded.x25519({} as never, key, Buffer.alloc(32)), /x25519: needs a 32-byte first argument or a key handle/],
    ['x25519Key short key', () => loaded.x25519Key(key.subarray(1), Buffer.alloc(32)), /x25519Key: needs a 32-byte private key/],
    ['x25519Generate short out', () => loaded.x25519Generate(Buffer.alloc(32), Buffer.alloc(31)), /x25519Generate: needs a 32-byte public key out/],
  ];
  for (const [name, call, message] of cases) {
    t.throws(call, TypeError, name);
    t.throws(call, message, `${name}: says what was wrong`);
  }
  t.ok(out.equals(Buffer.alloc(100, 9)), 'out untouched');
});

const ready = skip || unavailable !== undefined;

t.test('with associated data (the handshake\'s), seal and open are node:crypto\'s ChaCha20-Poly1305', { skip: ready }, async (t) => {
  if ('unavailable' in loaded) return;
  let same = 0;
  for (let i = 0; i < 200; i++) {
    const key = randomBytes(32), nonce = randomBytes(12), ad = randomBytes(i % 5 === 0 ? 0 : 1 + (i % 64)), text = randomBytes(i * 7 % 300);
    const c = createCipheriv('chacha20-poly1305', key, nonce, { authTagLength: 16 });
    c.setAAD(ad, { plaintextLength: text.length });
    const want = Buffer.concat([c.update(text), c.final(), c.getAuthTag()]);
    const out = Buffer.alloc(text.length + 16);
    const n = loaded.seal(key, nonce, text, out, 0, ad);
    const back = Buffer.alloc(text.length);
    if (n === want.length && out.equals(want) && loaded.open(key, nonce, want, back, 0, ad) && back.equals(text)) same++;
  }
  t.equal(same, 200, '200 records with 0-64 bytes of ad: the same bytes, and each opens the other\'s');
  const key = randomBytes(32), nonce = randomBytes(12), ad = randomBytes(32), text = randomBytes(48);
  const sealed = Buffer.alloc(64);
  loaded.seal(key, nonce, text, sealed, 0, ad);
  const out = Buffer.alloc(48, 7);
  const otherAd = Buffer.from(ad);
  otherAd[3] ^= 1;
  t.notOk(loaded.open(key, nonce, sealed, out, 0, otherAd), 'another ad: refused');
  t.notOk(loaded.open(key, nonce, sealed, out, 0), 'no ad: refused');
  t.ok(out.equals(Buffer.alloc(48, 7)), 'out untouched');
  const d = createDecipheriv('chacha20-poly1305', key, nonce, { authTagLength: 16 });
  d.setAAD(ad, { plaintextLength: 48 });
  d.setAuthTag(sealed.subarray(48));
  t.ok(Buffer.concat([d.update(sealed.subarray(0, 48)), d.final()]).equals(text), 'node:crypto opens it');
});

const PKCS8 = Buffer.from('302e020100300506032b656e04220420', 'hex');
const nodePrivate = (raw: Uint8Array) => createPrivateKey({ key: Buffer.concat([PKCS8, raw]), format: 'der', type: 'pkcs8' });
const nodePublicOf = (raw: Uint8Array) => Buffer.from(createPublicKey(nodePrivate(raw)).export({ format: 'jwk' }).x!, 'base64url');

t.test('X25519 keys held as handles agree as raw keys and node:crypto do', { skip: ready }, async (t) => {
  if ('unavailable' in loaded) return;
  let same = 0;
  for (let i = 0; i < 100; i++) {
    const priv = Buffer.alloc(32), pub = Buffer.alloc(32);
    const mine = loaded.x25519Generate(priv, pub);
    const raw = randomBytes(32), rawPub = Buffer.alloc(32);
    const theirs = loaded.x25519Key(raw, rawPub);
    const viaHandle = Buffer.alloc(32), viaRaw = Buffer.alloc(32), back = Buffer.alloc(32);
    const ok = loaded.x25519(mine, rawPub, viaHandle) && loaded.x25519(priv, rawPub, viaRaw) && loaded.x25519(theirs, pub, back);
    const node = diffieHellman({ privateKey: nodePrivate(priv), publicKey: createPublicKey(nodePrivate(raw)) });
    if (ok && pub.equals(nodePublicOf(priv)) && rawPub.equals(nodePublicOf(raw)) && viaHandle.equals(node) && viaRaw.equals(node) && back.equals(node)) same++;
  }
  t.equal(same, 100, 'generated and imported keys: public keys as node:crypto derives them, one secret from handle, raw key and node:crypto');
  const a = Buffer.alloc(32), b = Buffer.alloc(32);
  loaded.x25519Generate(a, Buffer.alloc(32));
  loaded.x25519Generate(b, Buffer.alloc(32));
  t.notOk(a.equals(b), 'two generated keys differ');
});

t.test('a refused agreement leaves nothing on OpenSSL\'s error queue for node:crypto to trip over', { skip: ready }, async (t) => {
  if ('unavailable' in loaded) return;
  const priv = Buffer.alloc(32);
  const handle = loaded.x25519Generate(priv, Buffer.alloc(32));
  const ZERO = Buffer.alloc(32);
  // Key bytes made beforehand: node:crypto's randomBytes itself clears the queue.
  const jwk = { kty: 'OKP', crv: 'X25519', x: randomBytes(32).toString('base64url') };
  const der = [randomBytes(32), randomBytes(32), randomBytes(32)];
  for (const key of [priv, handle]) {
    const out = Buffer.alloc(32, 5);
    t.notOk(loaded.x25519(key, ZERO, out), 'the all-zero point is refused');
    t.ok(out.equals(Buffer.alloc(32)), 'out zeroed');
    // node:crypto reads the thread's queue after some of its own calls: a stale error made this import throw.
    t.doesNotThrow(() => nodePrivate(der.pop()!), 'node:crypto imports a key next');
  }
  t.notOk(loaded.open(Buffer.alloc(32, 1), Buffer.alloc(12), Buffer.alloc(40, 2), Buffer.alloc(24), 0, Buffer.alloc(8)), 'a forged record is refused');
  t.doesNotThrow(() => nodePrivate(der.pop()!), 'node:crypto imports a key after it');
  t.doesNotThrow(() => createPublicKey({ key: jwk, format: 'jwk' }), 'and a JWK one');
});

t.test('zstdCompress writes frames node:zlib decodes, with one context reused call after call', { skip: ready }, async (t) => {
  if ('unavailable' in loaded) return;
  if (!loaded.zstdCompress) {
    t.fail('this Node\'s zstd is not visible to the addon (Node 24 links its own and exports it)');
    return;
  }
  const { zstdDecompressSync } = await import('node:zlib');
  let same = 0;
  for (let i = 0; i < 200; i++) {
    // JSON-like text of 0 B to ~190 KB, some of it repetitive, some random.
    const size = i % 50 === 0 ? 0 : Math.floor(Math.exp((i % 12) + 1));
    const text = i % 3 === 0 ? randomBytes(size) : Buffer.from(JSON.stringify({ n: i, pad: 'ab'.repeat(size) }));
    const frame = loaded.zstdCompress(text, 1 + (i % 3));
    if (frame.readUInt32LE(0) === 0xfd2fb528 && zstdDecompressSync(frame).equals(text)) same++;
  }
  t.equal(same, 200, '200 inputs of 0 B to 190 KB at levels 1-3: zstd frames of the same bytes');
  t.throws(() => loaded.zstdCompress!('text' as never, 1), /zstdCompress: needs the input as a Uint8Array/);
  t.throws(() => loaded.zstdCompress!(Buffer.alloc(4), 0), /zstdCompress: needs a level from 1 to 19/);
  t.throws(() => loaded.zstdCompress!(Buffer.alloc(4), 22), /level from 1 to 19/);
});
