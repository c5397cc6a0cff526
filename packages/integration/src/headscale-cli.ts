import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CliResult } from './cli.js';
import type { TapLike } from './tailscale.js';
import { exitCodeOf } from './cli.js';

/** HEADSCALE_VERSION is the headscale release whose CLI the gRPC tests drive (.ci/install-headscale.sh builds it). */
export const HEADSCALE_VERSION = 'v0.29.2';

/** headscaleHome is where install-headscale.sh puts versions: $HEADSCALE_HOME or ~/.cache/headway/headscale. */
export function headscaleHome(): string {
  const fromEnv = process.env.HEADSCALE_HOME;
  return fromEnv ? fromEnv : join(homedir(), '.cache', 'headway', 'headscale');
}

/** findHeadscale is the installed binary, or undefined (a half-finished build lives in <version>.partial and never counts). */
export function findHeadscale(version = HEADSCALE_VERSION): string | undefined {
  const bin = join(headscaleHome(), version, 'headscale');
  try {
    const st = statSync(bin);
    return st.isFile() && (st.mode & 0o111) !== 0 ? bin : undefined;
  } catch {
    return undefined;
  }
}

/**
 * requireHeadscale returns the real headscale binary, or undefined after skipping the
 * test (locally) or failing it (CI=true, where a missing binary means the install
 * step broke and must not pass silently).
 */
export function requireHeadscale(t: TapLike): string | undefined {
  const bin = findHeadscale();
  if (bin) return bin;
  const reason = `no headscale ${HEADSCALE_VERSION} under ${headscaleHome()}; run .ci/install-headscale.sh`;
  if (process.env.CI === 'true') {
    t.fail(reason);
  } else {
    t.comment(reason);
    t.skip(reason, () => undefined);
  }
  return undefined;
}

/**
 * runHeadscale runs headscale's CLI in remote mode against `address` (host:port of a
 * TLS gRPC listener; HEADSCALE_CLI_INSECURE skips certificate checks, as an operator
 * with a self-signed certificate would) with a scratch HOME, cwd and a minimal config
 * file, so nothing of the caller's environment decides what it talks to.
 */
/** runHeadscale runs the headscale CLI against address; `insecure: false` makes it speak TLS (its default), `cliTimeout` is its cli.timeout. */
export function runHeadscale(bin: string, opts: { address: string; apiKey: string; args: string[]; timeoutMs?: number; insecure?: boolean; cliTimeout?: string }): Promise<CliResult> {
  const home = mkdtempSync(join(tmpdir(), 'hs-cli-home-'));
  const config = join(home, 'config.yaml');
  // The CLI reads only these keys (and unix_socket, unused in remote mode); no update check.
  writeFileSync(config, `disable_check_updates: true\ncli:\n  timeout: ${opts.cliTimeout ?? '30s'}\n`);
  const env = {
    PATH: process.env.PATH ?? '', HOME: home, HEADSCALE_CONFIG: config,
    HEADSCALE_CLI_ADDRESS: opts.address, HEADSCALE_CLI_API_KEY: opts.apiKey, HEADSCALE_CLI_INSECURE: String(opts.insecure ?? true),
  };
  return new Promise((resolve) => {
    execFile(bin, opts.args, { cwd: home, env, timeout: opts.timeoutMs ?? 60_000 }, (err, stdout, stderr) => {
      rmSync(home, { recursive: true, force: true });
      const code = exitCodeOf(err);
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

/**
 * localApi calls Headway's REST API over its unix socket (trusted by file permission,
 * no API key), so comparing against it never touches the keys the test inspects.
 */
export function localApi(server: { urls: { socket?: string } }, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const req = request({
      socketPath: server.urls.socket, path, method,
      headers: payload ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } : {},
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => { text += c; });
      res.on('end', () => {
        let json: unknown;
        try { json = text ? JSON.parse(text) : undefined; } catch { json = text; }
        resolve({ status: res.statusCode ?? 0, json });
      });
    });
    req.on('error', reject);
    req.end(payload);
  });
}
