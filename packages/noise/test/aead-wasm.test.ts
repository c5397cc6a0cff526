// Transport records are sealed and opened with libsodium's WASM ChaCha20-Poly1305 (aead-wasm.ts); handshake
// messages with node:crypto. Both must be the same AEAD, byte for byte, in both directions.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { aeadOpen, aeadSeal, CipherState, TAG_LENGTH } from '../src/cipher.js';
import { openWasm, sealWasm, WASM_AEAD_MAX } from '../src/aead-wasm.js';

const NO_AD = Buffer.alloc(0);

t.test('sealWasm and openWasm agree with node:crypto for every record size', async (t) => {
  const key = randomBytes(32);
  for (const n of [0, 1, 15, 16, 17, 63, 64, 65, 1000, 4077, WASM_AEAD_MAX]) {
    const nonce = randomBytes(12);
    const text = randomBytes(n);
    const out = Buffer.alloc(n + TAG_LENGTH + 5, 0xee);
    t.equal(sealWasm(key, nonce, text, out, 5), n + TAG_LENGTH);
    t.ok(out.subarray(0, 5).equals(Buffer.alloc(5, 0xee)), `${n} B: nothing written before the offset`);
    t.ok(out.subarray(5).equals(aeadSeal(key, nonce, NO_AD, text)), `${n} B: the same ciphertext and tag as node:crypto`);
    const back = Buffer.alloc(n + 3);
    t.ok(openWasm(key, nonce, out.subarray(5), back, 3), `${n} B: opens`);
    t.ok(back.subarray(3).equals(text), `${n} B: the plaintext`);
    t.ok(aeadOpen(key, nonce, NO_AD, out.subarray(5)).equals(text), `${n} B: node:crypto opens it too`);
  }
});

t.test('openWasm refuses a changed byte, tag, nonce or key and leaves the output alone', async (t) => {
  const key = randomBytes(32), nonce = randomBytes(12), text = randomBytes(300);
  const sealed = aeadSeal(key, nonce, NO_AD, text);
  const out = Buffer.alloc(300, 7);
  for (const at of [0, 150, 299, 300, 315]) {
    const bad = Buffer.from(sealed);
    bad[at]! ^= 1;
    t.notOk(openWasm(key, nonce, bad, out, 0), `byte ${at} flipped`);
  }
  t.notOk(openWasm(key, randomBytes(12), sealed, out, 0), 'another nonce');
  t.notOk(openWasm(randomBytes(32), nonce, sealed, out, 0), 'another key');
  t.ok(out.equals(Buffer.alloc(300, 7)), 'the output untouched');
  t.throws(() => openWasm(key, nonce, Buffer.alloc(TAG_LENGTH - 1), out, 0), /not a sealed record/);
  t.throws(() => sealWasm(key, nonce, Buffer.alloc(WASM_AEAD_MAX + 1), Buffer.alloc(WASM_AEAD_MAX + 40), 0), /exceed/);
});

t.test('a CipherState pair talks across the two implementations, counter by counter', async (t) => {
  const key = randomBytes(32);
  const sender = new CipherState(key), receiver = new CipherState(key), reference = new CipherState(key);
  for (let i = 0; i < 50; i++) {
    const text = randomBytes(i * 83);
    const out = Buffer.alloc(text.length + TAG_LENGTH);
    sender.sealInto(text, out, 0); // WASM
    t.ok(out.equals(reference.seal(text)), `record ${i}: the same bytes as node:crypto's seal`);
    t.ok(receiver.open(out).equals(text), `record ${i}: opened`); // WASM
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
  t.ok(b.open(sealed).equals(big), 'a plaintext longer than WASM_AEAD_MAX still round-trips');
});
