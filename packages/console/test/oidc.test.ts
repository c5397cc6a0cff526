// adminRefusal: one matching admin list lets a verified person in; e-mail comparisons ignore case; an e-mail address
// the identity port left empty (not verified) matches no user or domain; groups match exactly.
import t from 'tap';
import { adminRefusal } from '../src/oidc.js';

const lists = { users: ['Alice@Example.com'], groups: ['netadmins'], domains: ['ops.example.org'] };

t.test('one matching list admits', async (t) => {
  t.equal(adminRefusal(lists, { email: 'alice@example.com', groups: [] }), undefined, 'allowed_users, any case');
  t.equal(adminRefusal(lists, { email: 'bob@OPS.example.org', groups: [] }), undefined, 'allowed_domains, any case');
  t.equal(adminRefusal(lists, { email: '', groups: ['netadmins'] }), undefined, 'allowed_groups, even without an e-mail address');
});

t.test('anyone else is refused with the reason', async (t) => {
  t.match(adminRefusal(lists, { email: 'carol@example.com', groups: ['engineering'] }), /^carol@example\.com may not administer this server: .*admin\.allowed_users/);
  t.match(adminRefusal(lists, { email: 'dave@sub.ops.example.org', groups: [] }), /may not administer/, 'a subdomain is not the domain');
  t.match(adminRefusal(lists, { email: '', groups: ['NetAdmins'] }), /^Your account \(its e-mail address is not verified\) may not/, 'groups match exactly; an empty (unverified) address matches nothing');
  t.match(adminRefusal({ users: [], groups: [], domains: ['example.com'] }, { email: 'example.com', groups: [] }), /may not/, 'an address without @ has no domain');
});
