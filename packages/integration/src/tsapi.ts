/**
 * tsapi is packages/integration/go/tsapi built by `.ci/install-tsapi.sh`: Tailscale's official Go API
 * client (tailscale.com/client/tailscale/v2) behind one subcommand per call, printing JSON. Tests run it
 * against a Headway server to check /api/v2 with the client real automation uses.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from './tailscale-setup.js';
import { exitCodeOf } from './cli.js';

/** tsapiSource is the Go module's directory in the repository. */
export const tsapiSource = (): string => join(repoRoot(), 'packages', 'integration', 'go', 'tsapi');

/**
 * tsapiSourceHash is the build's cache key, as install-tsapi.sh computes it: sha256 over
 * `sha256sum go.mod go.sum *.go` (C-sorted names), first 16 hex digits.
 */
export function tsapiSourceHash(dir = tsapiSource()): string {
  const names = readdirSync(dir).filter((n) => n === 'go.mod' || n === 'go.sum' || n.endsWith('.go')).sort();
  const listing = names.map((n) => `${createHash('sha256').update(readFileSync(join(dir, n))).digest('hex')}  ${n}\n`).join('');
  return createHash('sha256').update(listing).digest('hex').slice(0, 16);
}

/** tsapiBinary is the binary built from the current source, or undefined when install-tsapi.sh has not built it. */
export function tsapiBinary(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const root = env['TSAPI_HOME'] || join(homedir(), '.cache', 'headway', 'tsapi');
  const bin = join(root, tsapiSourceHash(), 'tsapi');
  return existsSync(bin) ? bin : undefined;
}

/** tsapiMissing says why tsapi cannot run here (undefined when it can). */
export function tsapiMissing(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return tsapiBinary(env) ? undefined : 'tsapi (the official Go API client) is not built for this source: bash .ci/install-tsapi.sh';
}

/** TsapiAuth is how tsapi authenticates: an API key, or an OAuth client asking for scopes. */
export type TsapiAuth = { apiKey: string } | { oauthId: string; oauthSecret: string; scopes?: string[] };

/** TsapiResult is one run: the exit code and the JSON it printed (a failure is `{error, status}`). */
export interface TsapiResult<T = any> { code: number; json: T; stderr: string }

/** tsapi runs one subcommand against `url` and parses what it printed; it never throws on a failed call. */
export function tsapi<T = any>(bin: string, url: string, auth: TsapiAuth, args: string[], timeoutMs = 60_000): Promise<TsapiResult<T>> {
  const authArgs = 'apiKey' in auth
    ? ['--api-key', auth.apiKey]
    : ['--oauth-id', auth.oauthId, '--oauth-secret', auth.oauthSecret, ...(auth.scopes ? ['--scopes', auth.scopes.join(',')] : [])];
  return new Promise((resolve) => {
    execFile(bin, ['--url', url, ...authArgs, ...args], { timeout: timeoutMs, env: { PATH: process.env.PATH ?? '' } }, (err, stdout, stderr) => {
      const code = exitCodeOf(err);
      let json: unknown;
      try {
        json = JSON.parse(String(stdout));
      } catch {
        json = { error: `unparsable output: ${String(stdout).slice(0, 500)}`, status: 0 };
      }
      resolve({ code, json: json as T, stderr: String(stderr) });
    });
  });
}
