import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ApiKeyInfo, ApiNode, ApiPreAuthKey, ApiUser } from '../src/api-types.js';
import { ApiClient } from '../src/client.js';

const SCRIPT = fileURLToPath(new URL('../../scripts/api-types.mjs', import.meta.url));
const SCHEMA = fileURLToPath(new URL('../../src/api-schema.ts', import.meta.url));

const check = (file?: string) => spawnSync(process.execPath, [SCRIPT, '--check', ...(file ? ['--file', file] : [])], { encoding: 'utf8', timeout: 120_000 });

t.test('the checked-in api-schema.ts is what openapi-typescript makes of the current document', async (t) => {
  const res = check();
  t.equal(res.status, 0, `api-schema.ts is current (otherwise run: npm run api-types -w @headway/cli)\n${res.stderr}`);
});

t.test('a stale api-schema.ts is detected', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'headway-api-types-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const stale = join(dir, 'api-schema.ts');
  // A field the server no longer sends, as when a schema changed without regenerating.
  writeFileSync(stale, readFileSync(SCHEMA, 'utf8').replace('givenName: string;', 'givenName: string;\n            nickname: string;'));
  const res = check(stale);
  t.equal(res.status, 1);
  t.match(res.stderr, /is stale: the API's schemas changed\. Run: npm run api-types -w @headway\/cli/);
});

/*
 * The client's calls are checked against the generated types at build time (tsc -b): a
 * path the API does not have, or an expected answer no operation sends, does not compile.
 * Each @ts-expect-error below fails the build if that check stops catching its mistake.
 */
function typeChecks(client: ApiClient) {
  return [
    client.get<{ nodes: ApiNode[] }>('/api/v1/node', { user: 'alice' }),
    client.get<{ node: ApiNode }>(`/api/v1/node/${'1'}`),
    client.post<{ user: ApiUser }>(`/api/v1/user/${'1'}/rename/${'bob'}`),
    client.post<{ preAuthKey?: ApiPreAuthKey }>('/api/v1/preauthkey/expire', { id: '1' }),
    client.get<{ apiKeys: ApiKeyInfo[] }>('/api/v1/apikey'),
    client.get<{ databaseConnectivity?: boolean }>('/api/v1/health'),
    client.delete('/api/v1/preauthkey', { id: '1' }),
    // @ts-expect-error no such path
    client.get<{ nodes: ApiNode[] }>('/api/v1/nodes'),
    // @ts-expect-error the path exists for DELETE only
    client.get<{ users: ApiUser[] }>(`/api/v1/user/${'1'}`),
    // @ts-expect-error no GET operation answers node names as strings
    client.get<{ nodes: string[] }>('/api/v1/node'),
    // @ts-expect-error no GET operation answers a field of that name
    client.get<{ hosts?: ApiNode[] }>('/api/v1/node'),
    // @ts-expect-error the node's `user` may be null, an answer that promises a user is wrong
    client.get<{ node: Omit<ApiNode, 'user'> & { user: ApiUser } }>(`/api/v1/node/${'1'}`),
  ];
}

t.test('the client type checks are compiled in (they run in tsc -b, not here)', async (t) => {
  t.type(typeChecks, 'function');
});
