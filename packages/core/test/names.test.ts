import t from 'tap';
import { GivenNames, sanitizeHostname, uniqueName, checkDnsLabel, checkTag, checkUserName, issueSecret, parseSecret, secretMatches, hashSecret, randomToken } from '../src/index.js';

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

t.test('random tokens are letters and digits, evenly drawn, never a flag on a command line', async (t) => {
  const tokens = Array.from({ length: 4000 }, () => randomToken(24));
  t.ok(tokens.every((k) => /^[A-Za-z0-9]{24}$/.test(k)), 'every token is 24 letters and digits (none starts with -)');
  t.equal(new Set(tokens).size, tokens.length, 'all distinct');
  // 96,000 characters over 62 letters and digits: about 1,548 each; a biased draw (a byte modulo 62 without
  // dropping the top of its range) gives the first eight about 1,935.
  const counts = new Map<string, number>();
  for (const k of tokens) for (const c of k) counts.set(c, (counts.get(c) ?? 0) + 1);
  t.equal(counts.size, 62, 'every letter and digit occurs');
  const [lo, hi] = [Math.min(...counts.values()), Math.max(...counts.values())];
  t.ok(lo > 1350 && hi < 1750, `each character drawn 1,350-1,750 times (${lo}-${hi})`);
  t.equal(randomToken(0), '');
  t.equal(randomToken(300).length, 300, 'longer than one draw of bytes');
});

t.test('GivenNames: a name is taken while a node holds it or a registration proposed it', async (t) => {
  const names = new GivenNames();
  names.add('web');
  t.equal(names.taken('web'), true);
  t.equal(names.taken('web', 'web'), false, 'not by the node that holds it');
  t.equal(names.taken('db'), false);
  names.claim('db');
  t.equal(names.taken('db'), true, 'a proposed name is taken');
  names.unclaim('db');
  t.equal(names.taken('db'), false);
  names.add('web');
  t.equal(names.taken('web', 'web'), true, 'held by two nodes (the count stays safe should storage hold a name twice), it is taken even for one of them');
  names.drop('web');
  t.equal(names.taken('web', 'web'), false);
  names.drop('web');
  t.equal(names.taken('web'), false, 'free once no node holds it');
});
