import t from 'tap';
import { runStorageContract } from '@headway/storage-contract';
import { startTestServer } from '@headway/integration';
import { MemoryStorage } from '../src/index.js';

await runStorageContract(t, 'memory storage', async () => new MemoryStorage());

await t.test('the server runs on it: database.type names the package', async (t) => {
  const s = await startTestServer({ database: { type: '@headway-examples/storage-memory' } });
  t.teardown(() => s.stop());
  t.match(s.storage.describe(), /^memory/);
  const user = await s.state.users.create({ name: 'alice' });
  t.same((await s.storage.users.get(user.id))?.name, 'alice', 'a user created through the server is in the store');
  t.ok(s.logs.some((l) => /storage is in memory/.test(l)), 'the adapter warned that nothing is kept');
});
