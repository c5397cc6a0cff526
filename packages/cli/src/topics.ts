import { Flags } from '@oclif/core';
import { LATEST_TIME, parsePrefix } from '@headway/core/ports';
import { UsageError } from './base.js';
import type { ApiClient } from './client.js';
import type { ApiUser } from './api-types.js';

/** TOPIC_ALIASES mirror headscale's topic aliases (`headscale user ls` works as `users list`). */
const TOPIC_ALIASES: Record<string, string[]> = {
  users: ['user'],
  nodes: ['node'],
  preauthkeys: ['preauthkey', 'authkey', 'pre'],
  apikeys: ['apikey', 'api'],
  oauthclients: ['oauthclient'],
  policy: [],
  debug: [],
  auth: [],
  generate: ['gen'],
};

/**
 * commandAliases lists every spelling of `topic verb` headscale accepts: the verb's aliases
 * under the topic, and all verbs under the topic's aliases (oclif aliases are full ids).
 */
export function commandAliases(topic: string, verb: string, verbAliases: string[] = []): string[] {
  const topics = [topic, ...(TOPIC_ALIASES[topic] ?? [])];
  const verbs = [verb, ...verbAliases];
  const out: string[] = [];
  for (const t of topics) for (const v of verbs) if (!(t === topic && v === verb)) out.push(`${t}:${v}`);
  return out;
}

const TAG = /^tag:[A-Za-z][A-Za-z0-9-]*$/;

/** checkTags insists on `tag:<name>` (a letter, then letters, digits or dashes) before anything is sent. */
export function checkTags(tags: string[], flag = '--tags'): string[] {
  for (const t of tags) {
    if (!TAG.test(t)) throw new UsageError(`${flag}: ${JSON.stringify(t)} is not a tag; tags look like tag:<name> (letters, digits, dashes; starting with a letter)`);
  }
  return [...new Set(tags)];
}

/** checkRoutes insists on CIDR prefixes (`10.0.0.0/8`, `fd00::/64`, `0.0.0.0/0`). */
export function checkRoutes(routes: string[], flag = '--routes'): string[] {
  for (const r of routes) {
    if (!r.includes('/') || parsePrefix(r) === undefined) throw new UsageError(`${flag}: ${JSON.stringify(r)} is not a CIDR prefix such as 10.0.0.0/24 or fd00::/64`);
  }
  return routes;
}

/** expiresAt turns a duration flag into the RFC 3339 time the API expects; one past year 9999 names the flag. */
export function expiresAt(ms: number, now = Date.now(), flag = '--expiration'): string {
  const at = now + ms;
  if (!(at <= LATEST_TIME)) throw new UsageError(`${flag}: the duration reaches past 9999-12-31; give a shorter one`);
  return new Date(at).toISOString();
}

/** resolveUser finds exactly one user by id or name (headscale's `-i ID` / `-n NAME`). */
export async function resolveUser(client: ApiClient, id: string | undefined, name: string | undefined): Promise<ApiUser> {
  const query = id ? { id } : { name };
  const { users } = await client.get<{ users: ApiUser[] }>('/api/v1/user', query);
  // The server compares names without case; an exact spelling wins if old data holds both.
  const exact = (users ?? []).filter((u) => (id ? u.id === id : u.name === name));
  const matches = exact.length || id ? exact : (users ?? []).filter((u) => u.name.toLowerCase() === name?.toLowerCase());
  if (matches.length === 0) throw new Error(id ? `no user with id ${id}` : `no user named ${JSON.stringify(name)}`);
  if (matches.length > 1) throw new Error(`${matches.length} users are named ${JSON.stringify(name)}; use --identifier`);
  return matches[0]!;
}

/**
 * requireOneOf fails with a usage error unless exactly one of the named flags was given: with two (`-i 8 -n keepme`)
 * acting on the first and ignoring the other could destroy or rename a user not named by both.
 */
export function requireOneOf(values: Record<string, unknown>, names: string[]): void {
  const given = names.filter((n) => values[n] !== undefined && values[n] !== '');
  if (given.length === 1) return;
  const list = names.map((n) => `--${n}`).join(' or ');
  throw new UsageError(given.length ? `pass only one of ${list}` : `pass ${list}`);
}

/** seg encodes one path segment (names may contain characters that are special in URLs). */
export function seg(value: string): string {
  return encodeURIComponent(value);
}

/**
 * matchesKeyPrefix says whether a key given on the command line (full secret, redacted
 * `hwkey-auth-<prefix>-***` form (`hskey-auth-` for keys imported from headscale), or bare prefix) names the listed key.
 */
export function matchesKeyPrefix(listed: string, given: string): boolean {
  if (listed === given) return true;
  // The prefix of a key imported from headscale (hskey-) is 12 characters that may hold '-'.
  const m = /^hwkey-[a-z]+-([^-]+)-|^hskey-[a-z]+-([A-Za-z0-9_-]{12})-/.exec(listed);
  if (!m) return false;
  return given === (m[1] ?? m[2]) || given === m[0].slice(0, -1) || given.startsWith(m[0]);
}

/**
 * authIdFlag is the ID of a pending login: the last part of the URL `tailscale up` printed.
 * The whole URL is accepted too (pasted from the device), and reduced to its ID.
 */
export const authIdFlag = Flags.custom<string>({
  parse: async (input: string) => {
    const raw = input.trim();
    const id = /^https?:\/\//i.test(raw) ? raw.replace(/[?#].*$/, '').replace(/\/+$/, '').split('/').pop() ?? '' : raw;
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(id)) {
      throw new UsageError(`${JSON.stringify(input)} is not an auth ID (the letters, digits, - and _ at the end of the login URL)`);
    }
    return id;
  },
});
