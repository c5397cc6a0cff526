import t, { type Test } from 'tap';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { repoRoot } from '../src/tailscale.js';
import { exitCodeOf } from '../src/cli.js';

/*
 * The image itself (Dockerfile at the repository root), built and run with rootful podman:
 * /health answers 200 on the published port, the HEALTHCHECK (`headway health`) passes,
 * the server runs as a non-root user on a read-only root file system (it writes only in
 * its data volume), `podman logs` is JSON lines, `podman stop` ends it with exit code 0,
 * and a removed headscale key in a mounted config is one FATAL line and exit code 1.
 *
 * No image registry can be reached here, so the base is assembled locally by
 * scripts/container-base.sh (Debian bookworm from debootstrap, Node 24 from the npm
 * registry) and passed as NODE_IMAGE. HEADWAY_TEST_IMAGE names an image built already
 * (.ci/run builds it while the other tests run); otherwise this test builds it.
 * Without podman the test is skipped with the reason; under CI=true, where .ci/run
 * installs podman, buildah, runc and debootstrap, a missing engine fails it.
 */

t.setTimeout(1_500_000);

const root = repoRoot();
/**
 * ENGINE_FLAGS: runc, not crun (crun refuses this machine's hybrid cgroup v1/v2 layout:
 * "cgroups in hybrid mode not supported"), and explicit ulimits (podman's defaults,
 * 1048576 open files, are above this sandbox's hard limit and setrlimit is refused).
 */
const ENGINE_FLAGS = ['--runtime', 'runc'];
const ULIMITS = ['--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=1024:1024'];

interface Ran { code: number; stdout: string; stderr: string }

function run(cmd: string, args: string[], timeoutMs = 120_000): Promise<Ran> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = exitCodeOf(err);
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

/**
 * podman runs the engine; its complaints that there is no systemd to schedule the
 * HEALTHCHECK on a timer are dropped from stderr (the check is run by hand below).
 */
async function podman(args: string[], timeoutMs?: number): Promise<Ran> {
  const r = await run('podman', [...ENGINE_FLAGS, ...args], timeoutMs);
  return { ...r, stderr: r.stderr.split('\n').filter((l) => !/unable to get systemd connection/.test(l)).join('\n').trim() };
}

function which(name: string): boolean {
  return (process.env.PATH ?? '').split(':').concat(['/usr/bin', '/usr/sbin']).some((d) => d && existsSync(join(d, name)));
}

const missing = ['podman', 'buildah', 'runc'].filter((n) => !which(n));
const skip = missing.length && process.env.CI !== 'true'
  ? `no container engine: ${missing.join(', ')} not installed (apt-get install podman buildah runc debootstrap)`
  : false;

/** buildImage builds the image from this repository on the locally assembled base; returns its name. */
async function buildImage(t: Test): Promise<string | undefined> {
  if (process.env.HEADWAY_TEST_IMAGE) return process.env.HEADWAY_TEST_IMAGE;
  const base = await run('bash', [join(root, 'scripts', 'container-base.sh')], 900_000);
  if (base.code !== 0) { t.fail(`assembling the base image failed: ${base.stderr.slice(-2000)}`); return undefined; }
  const baseImage = base.stdout.trim().split('\n').at(-1)!;
  const tag = 'localhost/headway:test';
  // No cache layers and the previous test image removed first: CI runs on the same machine
  // again and again, and each run's layers (about 1 GB) would otherwise stay on its disk.
  await podman(['rmi', '-f', tag]);
  const started = Date.now();
  const built = await podman(['build', '--layers=false', '--format', 'docker', ...ULIMITS, '--pull=never', '--build-arg', `NODE_IMAGE=${baseImage}`, '-t', tag, root], 1_200_000);
  t.comment(`image build: ${((Date.now() - started) / 1000).toFixed(0)} s`);
  if (built.code !== 0) { t.fail(`podman build failed: ${(built.stdout + built.stderr).slice(-3000)}`); return undefined; }
  return tag;
}

t.test('the container image: /health, health check, non-root, read-only root, JSON logs, clean stop, FATAL on a removed key', { skip }, async (t) => {
  t.same(missing, [], 'podman, buildah and runc are installed (.ci/run installs them)');
  if (missing.length) return;
  const image = await buildImage(t);
  if (!image) return;
  const size = await podman(['image', 'inspect', '--format', '{{.Size}}', image]);
  t.comment(`image ${image}: ${(Number(size.stdout.trim()) / 1e6).toFixed(0)} MB`);

  const id = randomBytes(4).toString('hex');
  const volume = `headway-test-${id}`;
  const name = `headway-test-${id}`;
  t.teardown(async () => {
    await podman(['rm', '-f', name, `${name}-bad`]);
    await podman(['volume', 'rm', '-f', volume]);
  });

  // The shipped config (0.0.0.0:8080 inside), the port published on loopback only, on an ephemeral host port.
  const started = await podman(['run', '-d', ...ULIMITS, '--name', name, '--read-only', '--read-only-tmpfs=false',
    '-v', `${volume}:/var/lib/headway`, '-p', '127.0.0.1::8080', image]);
  t.equal(started.code, 0, `podman run starts it ${started.stderr}`);
  if (started.code !== 0) return;
  const port = await podman(['port', name, '8080/tcp']);
  const hostPort = /127\.0\.0\.1:(\d+)/.exec(port.stdout)?.[1];
  t.ok(hostPort, `8080 is published: ${port.stdout}${port.stderr}`);

  let status = 0;
  for (let i = 0; i < 120 && status !== 200; i++) {
    status = await fetch(`http://127.0.0.1:${hostPort}/health`).then((r) => r.status, () => 0);
    if (status !== 200) await new Promise((r) => setTimeout(r, 500));
  }
  const logs = async () => { const l = await podman(['logs', name]); return l.stdout + l.stderr; };
  t.equal(status, 200, `/health answers 200 through the published port (logs: ${status === 200 ? '' : await logs()})`);

  const health = await podman(['healthcheck', 'run', name]);
  t.equal(health.code, 0, `the HEALTHCHECK (headway health) passes: ${health.stdout}${health.stderr}`);
  const uid = await podman(['exec', name, 'id', '-u']);
  t.not(uid.stdout.trim(), '0', `runs as a non-root user (uid ${uid.stdout.trim()})`);
  t.equal(uid.code, 0, 'podman exec works');
  const cli = await podman(['exec', name, 'headway', 'users', 'create', 'alice']);
  t.equal(cli.code, 0, `the CLI administers the server inside the container: ${cli.stderr}`);

  const stopStart = Date.now();
  const stop = await podman(['stop', '-t', '10', name], 60_000);
  const stopMs = Date.now() - stopStart;
  t.comment(`podman stop: ${stopMs} ms`);
  t.equal(stop.code, 0, `podman stop: ${stop.stderr}`);
  const state = await podman(['inspect', '--format', '{{.State.ExitCode}}', name]);
  t.equal(state.stdout.trim(), '0', 'exit code 0 after SIGTERM (not killed after the grace period)');

  const out = (await podman(['logs', name])).stdout;
  const lines = out.split('\n').filter(Boolean);
  const notJson = lines.filter((l) => { try { return typeof JSON.parse(l).msg !== 'string'; } catch { return true; } });
  t.same(notJson, [], 'every log line is one JSON object');
  t.match(lines.map((l) => JSON.parse(l).msg as string), ['config file loaded', 'data directory'], 'the image config was loaded');
  t.equal(JSON.parse(lines.at(-1)!).msg, 'stopped', 'the last line says it stopped');
  t.notMatch(out + (await podman(['logs', name])).stderr, /EROFS|read-only file system/i, 'nothing tried to write outside the data volume');

  // The restart loop a removed key causes: the same FATAL line on every start, exit code 1.
  const cfgDir = mkdtempSync(join(tmpdir(), 'hw-image-cfg-'));
  t.teardown(() => rmSync(cfgDir, { recursive: true, force: true }));
  const cfg = join(cfgDir, 'config.yaml');
  writeFileSync(cfg, ['data_dir: /var/lib/headway', 'listen_addr: 0.0.0.0:8080', 'log:', '  format: json', 'dns_config:', '  magic_dns: true', ''].join('\n'));
  chmodSync(cfgDir, 0o755);
  chmodSync(cfg, 0o644);
  const bad = await podman(['run', ...ULIMITS, '--name', `${name}-bad`, '--read-only', '-v', `${volume}:/var/lib/headway`,
    '-v', `${cfg}:/etc/headway/config.yaml:ro`, image]);
  t.equal(bad.code, 1, 'a removed key: exit code 1');
  const fatal = bad.stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l) as { level: string; msg: string }).filter((l) => l.level === 'fatal');
  t.same(fatal.map((l) => l.msg), ['dns_config.magic_dns: removed: use `dns.magic_dns`'], `one FATAL line naming the key ${bad.stderr}`);
});
