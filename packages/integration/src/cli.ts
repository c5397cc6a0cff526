import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from './tailscale.js';

export interface CliResult { code: number; stdout: string; stderr: string }

/**
 * runHeadway runs the real `headway` CLI as an administrator would, with a scratch
 * HOME and cwd and none of the caller's HEADWAY_* variables, so only `env`
 * (typically HEADWAY_UNIX_SOCKET, or HEADWAY_CLI_ADDRESS + HEADWAY_CLI_API_KEY)
 * decides which server it reaches.
 */
export function runHeadway(env: Record<string, string>, args: string[], timeoutMs = 60_000): Promise<CliResult> {
  const home = mkdtempSync(join(tmpdir(), 'hw-cli-home-'));
  const clean: Record<string, string> = { PATH: process.env.PATH ?? '', HOME: home, ...env };
  const bin = join(repoRoot(), 'packages', 'cli', 'bin', 'run.js');
  return new Promise((resolve) => {
    execFile(process.execPath, [bin, ...args], { cwd: home, env: clean, timeout: timeoutMs }, (err, stdout, stderr) => {
      rmSync(home, { recursive: true, force: true });
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

/** runHeadwayOn runs the CLI against a test server's local socket. */
export function runHeadwayOn(server: { urls: { socket?: string } }, args: string[], timeoutMs?: number): Promise<CliResult> {
  return runHeadway({ HEADWAY_UNIX_SOCKET: server.urls.socket ?? '' }, args, timeoutMs);
}
