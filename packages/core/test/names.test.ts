import t from 'tap';
import { sanitizeHostname, uniqueName, checkDnsLabel, checkTag, checkUserName, issueSecret, parseSecret, secretMatches, hashSecret } from '../src/index.js';

t.test('hostnames become DNS labels the way Tailscale does', async (t) => {
  t.equal(sanitizeHostname('My Laptop'), 'my-laptop');
  t.equal(sanitizeHostname('host.example.com'), 'host');
  t.equal(sanitizeHostname('--Über__box--'), 'ber-box');
  t.equal(sanitizeHostname(''), 'node');
  t.equal(sanitizeHostname('a'.repeat(80)).length, 63);
});

t.test('unique names get -1, -2 ...', async (t) => {
  const taken = new Set(['web', 'web-1']);
  t.equal(uniqueName('web', (n) => taken.has(n)), 'web-2');
  t.equal(uniqueName('db', (n) => taken.has(n)), 'db');
});

t.test('validators name the problem', async (t) => {
  t.equal(checkDnsLabel('ok-name'), undefined);
  t.match(checkDnsLabel('Bad_Name'), /DNS label/);
  t.match(checkDnsLabel('-x'), /DNS label/);
  t.equal(checkTag('tag:server'), undefined);
  t.match(checkTag('server'), /tag:<name>/);
  t.equal(checkUserName('alice'), undefined);
  t.match(checkUserName('al ice'), /letters, digits/);
});

t.test('secrets: shown once, stored hashed, compared exactly', async (t) => {
  const s = issueSecret('api');
  t.match(s.full, /^hwkey-api-[a-z0-9]{12}-[A-Za-z0-9_-]{43}$/);
  const p = parseSecret('api', s.full)!;
  t.equal(p.prefix, s.prefix);
  t.ok(secretMatches(p.secret, s.hash));
  t.notOk(secretMatches(p.secret.replace(/.$/, (c) => (c === 'A' ? 'B' : 'A')), s.hash));
  t.not(s.hash, p.secret);
  t.equal(s.hash, hashSecret(p.secret));
  t.equal(parseSecret('auth', s.full), undefined, 'an API key is not a pre-auth key');
});
