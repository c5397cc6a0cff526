import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from './tailscale.js';

export interface CliResult { code: number; stdout: string; stderr: string }

/** exitCodeOf is a child's exit status as execFile's callback reports it: 0 without an error, 1 when it names none (a signal, a timeout). */
export function exitCodeOf(err: unknown): number {
  if (!err) return 0;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'number' ? code : 1;
}

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
      const code = exitCodeOf(err);
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

/** runHeadwayOn runs the CLI against a test server's local socket. */
export function runHeadwayOn(server: { urls: { socket?: string } }, args: string[], timeoutMs?: number): Promise<CliResult> {
  return runHeadway({ HEADWAY_UNIX_SOCKET: server.urls.socket ?? '' }, args, timeoutMs);
}
