import t from 'tap';
import { UsageError, normalizeBooleanArgv, usageLine } from '../src/base.js';
import { renderTable, shortKey } from '../src/format.js';
import { checkRoutes, checkTags, commandAliases, matchesKeyPrefix } from '../src/topics.js';
import { closest } from '../src/suggest.js';

const FLAGS = {
  ephemeral: { type: 'boolean', allowNo: true },
  strict: { type: 'boolean', allowNo: false },
  user: { type: 'option' },
};

t.test('normalizeBooleanArgv', async (t) => {
  t.same(normalizeBooleanArgv(['--ephemeral=true', '--ephemeral=FALSE', '--user=x', '--ephemeral'], FLAGS), ['--ephemeral', '--no-ephemeral', '--user=x', '--ephemeral']);
  t.same(normalizeBooleanArgv(['--', '--ephemeral=false'], FLAGS), ['--', '--ephemeral=false'], 'after -- untouched');
  t.throws(() => normalizeBooleanArgv(['--ephemeral=perhaps'], FLAGS), new UsageError('--ephemeral expects true or false, got "perhaps"'));
  t.throws(() => normalizeBooleanArgv(['--strict=false'], FLAGS), /cannot be set to false/);
});

t.test('usageLine', async (t) => {
  t.equal(usageLine('Parsing --expiration \n\t"x" is not a duration\nSee more help with --help'), '--expiration: "x" is not a duration');
  t.equal(usageLine('The following error occurred:\n  Missing required flag identifier\nSee more help with --help'), 'missing required flag --identifier');
});

t.test('matchesKeyPrefix', async (t) => {
  const listed = 'hwkey-auth-abc123-***';
  t.ok(matchesKeyPrefix(listed, 'abc123'));
  t.ok(matchesKeyPrefix(listed, 'hwkey-auth-abc123'));
  t.ok(matchesKeyPrefix(listed, 'hwkey-auth-abc123-secretpart'));
  t.ok(matchesKeyPrefix(listed, listed));
  t.notOk(matchesKeyPrefix(listed, 'abc'));
  t.notOk(matchesKeyPrefix(listed, 'hwkey-auth-abc1234-secret'));
});

t.test('matchesKeyPrefix: keys imported from headscale, whose prefix may hold -', async (t) => {
  const listed = 'hskey-auth-Ab-_cd0123Ef-***';
  t.ok(matchesKeyPrefix(listed, 'Ab-_cd0123Ef'));
  t.ok(matchesKeyPrefix(listed, 'hskey-auth-Ab-_cd0123Ef'));
  t.ok(matchesKeyPrefix(listed, `hskey-auth-Ab-_cd0123Ef-${'x'.repeat(64)}`));
  t.notOk(matchesKeyPrefix(listed, 'Ab'));
});

t.test('checks and helpers', async (t) => {
  t.same(checkTags(['tag:a', 'tag:b-2', 'tag:a']), ['tag:a', 'tag:b-2']);
  t.throws(() => checkTags(['tag:1x']), /"tag:1x" is not a tag/);
  t.throws(() => checkTags(['group:x']), /is not a tag/);
  t.same(checkRoutes(['0.0.0.0/0', '::/0', '10.1.0.0/16']), ['0.0.0.0/0', '::/0', '10.1.0.0/16']);
  t.throws(() => checkRoutes(['300.1.1.1/8']), /not a CIDR/);
  t.same(commandAliases('apikeys', 'expire', ['revoke']).sort(), ['api:expire', 'api:revoke', 'apikey:expire', 'apikey:revoke', 'apikeys:revoke']);
  t.equal(shortKey('nodekey:0123456789abcdef'), 'nodekey:01234567');
  t.equal(renderTable(['A', 'Bee'], [['long value', ['x', 'y']], ['s', '']]), 'A           Bee\nlong value  x, y\ns');
});

t.test('closest suggests a near spelling and nothing for unrelated words', async (t) => {
  t.equal(closest('lst', ['list', 'create', 'rename']), 'list');
  t.equal(closest('--expire', ['--user', '--reusable', '--expiration']), '--expiration', 'shared start');
  t.equal(closest('--exp', ['--user', '--expiration']), '--expiration', 'prefix');
  t.equal(closest('nodse', ['users', 'nodes']), 'nodes', 'transposed letters');
  t.equal(closest('frobnicate', ['users', 'nodes', 'list']), undefined);
  t.equal(closest('x', ['xy']), undefined, 'one letter suggests nothing');
  t.equal(closest('lst', ['list', 'ls']), 'list', 'a tie goes to the earlier (documented) spelling');
});
