import t from 'tap';
import { randomBytes } from 'node:crypto';
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
  ];
  for (const [name, call, message] of cases) {
    t.throws(call, TypeError, name);
    t.throws(call, message, `${name}: says what was wrong`);
  }
  t.ok(out.equals(Buffer.alloc(100, 9)), 'out untouched');
});
