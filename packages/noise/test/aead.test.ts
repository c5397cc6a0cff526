// Transport records are sealed and opened by recordAead: OpenSSL's ChaCha20-Poly1305 through @headway/aead's addon,
// or libsodium's WASM build where the addon is missing (aead.ts); handshake messages with node:crypto. All three must
// be the same AEAD, byte for byte, in both directions.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { aeadOpen, aeadSeal, CipherState, nodeNoiseHkdf, noiseHkdf, TAG_LENGTH } from '../src/cipher.js';
import { generateKeyPair, nodeX25519, x25519, ZERO_KEY } from '../src/keys.js';
import { recordAead, wasmRecordAead, type RecordAead } from '../src/aead.js';
import { WASM_AEAD_MAX } from '../src/aead-wasm.js';

const NO_AD = Buffer.alloc(0);
const CI = process.env.CI === 'true';

t.test('records are sealed with the OpenSSL addon where it is built', async (t) => {
  // CI builds it (scripts/build-sqlite.sh): there it must be the one in use.
  if (!CI && recordAead.backend === 'wasm') t.comment(`the addon is not in use: ${recordAead.unavailable} (bash scripts/build-sqlite.sh builds it)`);
  else t.equal(recordAead.backend, 'openssl', recordAead.unavailable ?? 'the addon loaded');
  t.equal(recordAead.max, WASM_AEAD_MAX, 'both backends take records of the same size');
});

const WASM_RECORD_AEAD = await wasmRecordAead();
const backends: RecordAead[] = recordAead.backend === 'openssl' ? [recordAead, WASM_RECORD_AEAD] : [WASM_RECORD_AEAD];

for (const aead of backends) {
  t.test(`${aead.backend}: seal and open agree with node:crypto for every record size`, async (t) => {
    const key = randomBytes(32);
    for (const n of [0, 1, 15, 16, 17, 63, 64, 65, 1000, 4077, aead.max]) {
      const nonce = randomBytes(12);
      const text = randomBytes(n);
      const out = Buffer.alloc(n + TAG_LENGTH + 9, 0xee);
      t.equal(aead.seal(key, nonce, text, out, 5), n + TAG_LENGTH);
      t.ok(out.subarray(0, 5).equals(Buffer.alloc(5, 0xee)), `${n} B: nothing written before the offset`);
      t.ok(out.subarray(n + TAG_LENGTH + 5).equals(Buffer.alloc(4, 0xee)), `${n} B: nothing written after the record`);
      t.ok(out.subarray(5, n + TAG_LENGTH + 5).equals(aeadSeal(key, nonce, NO_AD, text)), `${n} B: the same ciphertext and tag as node:crypto`);
      const back = Buffer.alloc(n + 3);
      t.ok(aead.open(key, nonce, out.subarray(5, n + TAG_LENGTH + 5), back, 3), `${n} B: opens`);
      t.ok(back.subarray(3).equals(text), `${n} B: the plaintext`);
      t.ok(aeadOpen(key, nonce, NO_AD, out.subarray(5, n + TAG_LENGTH + 5)).equals(text), `${n} B: node:crypto opens it too`);
    }
  });

  t.test(`${aead.backend}: open refuses a changed byte, tag, nonce or key and leaves the output alone`, async (t) => {
    const key = randomBytes(32), nonce = randomBytes(12), text = randomBytes(300);
    const sealed = aeadSeal(key, nonce, NO_AD, text);
    const out = Buffer.alloc(300, 7);
    for (const at of [0, 150, 299, 300, 315]) {
      const bad = Buffer.from(sealed);
      bad[at]! ^= 1;
      t.notOk(aead.open(key, nonce, bad, out, 0), `byte ${at} flipped`);
    }
    t.notOk(aead.open(key, randomBytes(12), sealed, out, 0), 'another nonce');
    t.notOk(aead.open(randomBytes(32), nonce, sealed, out, 0), 'another key');
    t.ok(out.equals(Buffer.alloc(300, 7)), 'the output untouched');
    t.throws(() => aead.open(key, nonce, Buffer.alloc(TAG_LENGTH - 1), out, 0), /sealed record/);
    t.throws(() => aead.seal(key, nonce, Buffer.alloc(aead.max + 1), Buffer.alloc(aead.max + 40), 0), /exceed|at most 4096/);
  });
}

t.test('the two backends open each other\'s records, for random sizes and keys', { skip: backends.length < 2 && 'the addon is not built' }, async (t) => {
  let same = 0;
  for (let i = 0; i < 300; i++) {
    const key = randomBytes(32), nonce = randomBytes(12), text = randomBytes((i * 137) % (WASM_AEAD_MAX + 1));
    const a = Buffer.alloc(text.length + TAG_LENGTH), b = Buffer.alloc(text.length + TAG_LENGTH);
    recordAead.seal(key, nonce, text, a, 0);
    WASM_RECORD_AEAD.seal(key, nonce, text, b, 0);
    if (a.equals(b)) same++;
    const back = Buffer.alloc(text.length);
    t.ok(WASM_RECORD_AEAD.open(key, nonce, a, back, 0) && back.equals(text), `record ${i}: WASM opens OpenSSL's`);
    back.fill(0);
    t.ok(recordAead.open(key, nonce, b, back, 0) && back.equals(text), `record ${i}: OpenSSL opens WASM's`);
  }
  t.equal(same, 300, 'every record the same bytes');
});

t.test('a CipherState pair talks across the implementations, counter by counter', async (t) => {
  const key = randomBytes(32);
  const sender = new CipherState(key), receiver = new CipherState(key), reference = new CipherState(key);
  for (let i = 0; i < 50; i++) {
    const text = randomBytes(i * 83);
    const out = Buffer.alloc(text.length + TAG_LENGTH);
    sender.sealInto(text, out, 0); // recordAead
    t.ok(out.equals(reference.seal(text)), `record ${i}: the same bytes as node:crypto's seal`);
    t.ok(receiver.open(out).equals(text), `record ${i}: opened`); // recordAead
  }
  const bad = Buffer.alloc(TAG_LENGTH + 10);
  sender.sealInto(Buffer.alloc(10), bad, 0);
  bad[0]! ^= 0x80;
  t.throws(() => receiver.open(bad), /message authentication failed/);
  // Longer than a record: node:crypto, with the same nonce sequence.
  const big = randomBytes(WASM_AEAD_MAX + 500);
  const a = new CipherState(key), b = new CipherState(key);
  const sealed = Buffer.alloc(big.length + TAG_LENGTH);
  a.sealInto(big, sealed, 0);
  t.ok(b.open(sealed).equals(big), 'a plaintext longer than a record still round-trips');
});

t.test('the handshake\'s X25519 and HKDF through the addon give node:crypto\'s bytes', { skip: backends.length < 2 && 'the addon is not built' }, async (t) => {
  t.ok(recordAead.x25519 && recordAead.noiseHkdf, 'the addon brings both');
  let agreed = 0;
  for (let i = 0; i < 200; i++) {
    const a = generateKeyPair(), b = generateKeyPair();
    const shared = x25519(a.privateKey, b.publicKey);
    if (shared.equals(nodeX25519(a.privateKey, b.publicKey)) && shared.equals(nodeX25519(b.privateKey, a.publicKey))) agreed++;
  }
  t.equal(agreed, 200, 'every agreement the same as node:crypto\'s, from either side');
  // Low-order points (RFC 7748 §6.1's zero result; Curve25519's small subgroup): refused as node:crypto refuses them.
  const lowOrder = [
    ZERO_KEY,
    Buffer.from('0100000000000000000000000000000000000000000000000000000000000000', 'hex'),
    Buffer.from('e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800', 'hex'),
  ];
  const me = generateKeyPair();
  for (const p of lowOrder) {
    t.throws(() => x25519(me.privateKey, p), /all-zero/, `${p.toString('hex').slice(0, 8)}…: refused`);
    t.throws(() => nodeX25519(me.privateKey, p), /all-zero/, `${p.toString('hex').slice(0, 8)}…: node:crypto refuses it too`);
  }
  t.throws(() => x25519(me.privateKey.subarray(1), me.publicKey), /32 raw bytes/, 'a short key is refused before the addon');
  for (let i = 0; i < 200; i++) {
    const ck = randomBytes(32), input = randomBytes(i % 3 === 0 ? 0 : 32 * (i % 4));
    const [a, b] = noiseHkdf(ck, input);
    const [c, d] = nodeNoiseHkdf(ck, input);
    if (!a.equals(c) || !b.equals(d)) { t.fail(`HKDF ${i}: differs from node:crypto's`); return; }
  }
  t.pass('200 HKDFs (inputs of 0 to 96 bytes) the same as node:crypto\'s');
  t.throws(() => recordAead.noiseHkdf!(randomBytes(32), randomBytes(32), Buffer.alloc(63)), /noiseHkdf: needs a 64-byte out/);
  t.throws(() => recordAead.x25519!(randomBytes(31), randomBytes(32), Buffer.alloc(32)), /x25519: needs a 32-byte first argument/);
});
