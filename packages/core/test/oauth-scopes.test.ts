import t from 'tap';
import { narrowScopes } from '../src/oauth/scopes.js';

t.test('a token narrows to what its changed client still has', async (t) => {
  t.same(narrowScopes(['auth_keys', 'devices:core'], ['auth_keys', 'devices:core']), ['auth_keys', 'devices:core'], 'unchanged');
  t.same(narrowScopes(['auth_keys', 'devices:core'], ['devices:core:read']), ['devices:core:read'], 'a write scope cut to reading; a dropped one gone');
  t.same(narrowScopes(['devices:core:read'], ['devices:core']), ['devices:core:read'], 'a widened client does not widen the token');
  t.same(narrowScopes(['all'], ['dns', 'users:read']), ['dns', 'users:read'], 'all held: the client\'s scopes');
  t.same(narrowScopes(['all:read'], ['dns', 'users:read']), ['dns:read', 'users:read'], 'all:read held: reading of each');
  t.same(narrowScopes(['dns'], ['all']), ['dns'], 'a client with all keeps the token as issued');
  t.same(narrowScopes(['dns'], ['auth_keys']), [], 'nothing in common: nothing');
});
