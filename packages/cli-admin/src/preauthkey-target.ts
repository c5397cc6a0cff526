import { UsageError, type ApiClient, type ApiPreAuthKey, matchesKeyPrefix } from '@headway/cli';

/**
 * preAuthKeyId resolves `--id ID`, or a positional key / key prefix (headscale's older
 * `--user U KEY` form) by listing the keys, to the id the API wants.
 */
export async function preAuthKeyId(client: () => ApiClient, id: string | undefined, key: string | undefined, user: string | undefined): Promise<string> {
  if (id && key) throw new UsageError('pass either --id or a KEY, not both');
  if (id) return id;
  if (!key) throw new UsageError('pass --id ID (or the key or its prefix)');
  const { preAuthKeys = [] } = await client().get<{ preAuthKeys: ApiPreAuthKey[] }>('/api/v1/preauthkey', { user });
  const matches = preAuthKeys.filter((k) => matchesKeyPrefix(k.key, key));
  if (matches.length === 0) throw new Error(`no pre-auth key matches ${JSON.stringify(key)}${user ? ` for user ${user}` : ''}`);
  if (matches.length > 1) throw new Error(`${matches.length} pre-auth keys match ${JSON.stringify(key)}; use --id`);
  return matches[0]!.id;
}
