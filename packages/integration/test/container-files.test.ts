import t from 'tap';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import YAML from 'yaml';
import { configSearchPath, loadConfig, parseHostPort } from '@headway/core';
import { repoRoot } from '../src/tailscale.js';

/*
 * Dockerfile, compose.yaml, .dockerignore and the image's config
 * (packages/cli/contrib/container/config.yaml) must agree with each other and with
 * Headway's own defaults: where the CLI looks for its config, which ports the config
 * opens, where data_dir is. No container engine is needed for this; container-image.test.ts
 * builds and runs the image where one works.
 */

const root = repoRoot();

/** Instruction is one Dockerfile instruction with its continuation lines joined. */
interface Instruction { op: string; args: string; line: number }

/** parseDockerfile splits a Dockerfile into instructions: comments dropped, `\` continuations joined. */
function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = [];
  let pending = '';
  let start = 0;
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (!pending && (!line || line.startsWith('#'))) return;
    if (pending && line.startsWith('#')) return;
    if (!pending) start = i + 1;
    const cont = line.endsWith('\\');
    pending += (pending ? ' ' : '') + (cont ? line.slice(0, -1).trim() : line);
    if (cont) return;
    const m = /^(\w+)\s+([\s\S]*)$/.exec(pending);
    if (!m) throw new Error(`Dockerfile line ${start}: not an instruction: ${pending}`);
    out.push({ op: m[1]!.toUpperCase(), args: m[2]!.trim(), line: start });
    pending = '';
  });
  if (pending) throw new Error('Dockerfile ends inside a continued line');
  return out;
}

/** Stage is a FROM and the instructions up to the next FROM. */
interface Stage { from: string; name?: string; body: Instruction[] }

function stages(ins: Instruction[]): Stage[] {
  const out: Stage[] = [];
  for (const i of ins) {
    if (i.op === 'FROM') {
      const m = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(i.args);
      if (!m) throw new Error(`FROM on line ${i.line}: ${i.args}`);
      out.push({ from: m[1]!, name: m[2], body: [] });
    } else out.at(-1)?.body.push(i);
  }
  return out;
}

/** words splits COPY/EXPOSE arguments, leaving --flags out. */
const words = (args: string) => args.split(/\s+/).filter((w) => w && !w.startsWith('--'));
const flags = (args: string) => args.split(/\s+/).filter((w) => w.startsWith('--'));

const dockerfile = readFileSync(join(root, 'Dockerfile'), 'utf8');
const ins = parseDockerfile(dockerfile);
const all = stages(ins);
const runtime = all.at(-1)!;
const one = (op: string) => runtime.body.filter((i) => i.op === op).at(-1);
const args = new Map(ins.filter((i) => i.op === 'ARG').map((i) => { const [k, v] = i.args.split('='); return [k!, v ?? ''] as const; }));
const expand = (s: string) => s.replace(/\$\{(\w+)\}|\$(\w+)/g, (_, a?: string, b?: string) => args.get((a ?? b)!) ?? '');
const runtimeEnv = new Map<string, string>();
for (const i of runtime.body.filter((x) => x.op === 'ENV')) {
  for (const m of i.args.matchAll(/(\w+)=("[^"]*"|\S+)/g)) runtimeEnv.set(m[1]!, m[2]!.replace(/^"|"$/g, ''));
}

const imageConfigPath = join(root, 'packages', 'cli', 'contrib', 'container', 'config.yaml');
const compose = YAML.parse(readFileSync(join(root, 'compose.yaml'), 'utf8')) as {
  services: Record<string, { build?: unknown; image?: string; restart?: string; ports?: string[]; volumes?: string[]; stop_grace_period?: string }>;
  volumes?: Record<string, unknown>;
};
const ignore = readFileSync(join(root, '.dockerignore'), 'utf8').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));

/** ignored tells whether .dockerignore keeps `path` (relative to the root) out of the build context. */
function ignored(path: string): boolean {
  // Go's filepath.Match plus `**` (any number of directories), as Docker reads the file.
  const toRe = (p: string) => new RegExp('^' + p.split(/(\*\*\/|\*\*|\*|\?)/).map((part) =>
    part === '**/' ? '(?:.*/)?' : part === '**' ? '.*' : part === '*' ? '[^/]*' : part === '?' ? '[^/]' : part.replace(/[.+^${}()|[\]\\]/g, '\\$&'),
  ).join('') + '(?:/.*)?$');
  let out = false;
  for (const p of ignore) {
    if (p.startsWith('!')) { if (toRe(p.slice(1)).test(path)) out = false; } else if (toRe(p).test(path)) out = true;
  }
  return out;
}

t.test('Dockerfile: a build stage and a slim Node 24 runtime stage', async (t) => {
  t.equal(all.length, 2, 'two stages');
  t.equal(all[0]!.name, 'build');
  const base = expand(all[0]!.from);
  t.match(base, /^node:24-[a-z]+-slim$/, `Node 24 slim base (Headway needs 24): ${base}`);
  t.equal(expand(runtime.from), base, 'the runtime stage is the same slim base');
  const buildRuns = all[0]!.body.filter((i) => i.op === 'RUN').map((i) => i.args).join('\n');
  t.match(buildRuns, /scripts\/build-sqlite\.sh/, 'better-sqlite3 is compiled from source');
  t.match(buildRuns, /npm ci --ignore-scripts/, 'no install scripts run');
  t.match(buildRuns, /tsc -b/, 'TypeScript is compiled in the build stage');
  t.notMatch(runtime.body.filter((i) => i.op === 'RUN').map((i) => i.args).join('\n'), /apt-get install|g\+\+|npm ci/, 'the runtime stage installs no compiler and no packages');
});

t.test('Dockerfile: every COPY source exists in the build context', async (t) => {
  for (const stage of all) {
    for (const i of stage.body.filter((x) => x.op === 'COPY' || x.op === 'ADD')) {
      if (flags(i.args).some((f) => f.startsWith('--from='))) {
        const from = flags(i.args).find((f) => f.startsWith('--from='))!.slice(7);
        t.ok(all.some((s) => s.name === from), `line ${i.line}: stage ${from} exists`);
        continue;
      }
      const w = words(i.args);
      for (const src of w.slice(0, -1)) {
        t.ok(existsSync(join(root, src)), `line ${i.line}: ${src} exists`);
        t.notOk(ignored(src), `line ${i.line}: ${src} is not excluded by .dockerignore`);
      }
    }
  }
  for (const p of ['node_modules', 'packages/core/dist', 'packages/cli/node_modules', '.git', 'packages/cli/oclif.manifest.json']) {
    t.ok(ignored(p), `.dockerignore keeps ${p} out (the image builds from source)`);
  }
  t.notOk(ignored('packages/core/src/index.ts'), 'sources are in the context');
});

t.test('Dockerfile: non-root user, config, volume, ports, health check and entrypoint agree with the config', async (t) => {
  const user = one('USER')?.args;
  t.ok(user && user !== 'root' && user !== '0', `runs as a non-root user: ${user}`);
  const runs = runtime.body.filter((i) => i.op === 'RUN').map((i) => i.args).join('\n');
  t.match(runs, new RegExp(`useradd [^\\n]*--uid (\\d+)[^\\n]* ${user}\\b`), 'the user is created');
  t.notMatch(/--uid (\d+)/.exec(runs)?.[1], /^0$/, 'with a uid other than 0');

  const searchPath = configSearchPath({ env: {}, home: '/nonexistent', cwd: '/' })[0];
  t.equal(searchPath, '/etc/headway/config.yaml', 'the first place serve looks for its config');
  const copied = runtime.body.filter((i) => i.op === 'COPY' && !flags(i.args).length).map((i) => words(i.args));
  t.ok(copied.some((w) => w[0] === 'packages/cli/contrib/container/config.yaml' && w[1] === searchPath), 'the image config is copied there');

  const { config, problems } = loadConfig({ path: imageConfigPath, env: {}, home: '/nonexistent' });
  t.same(problems.filter((p) => p.level !== 'warn'), [], 'the image config loads without errors');
  const volume = JSON.parse(one('VOLUME')!.args) as string[];
  t.same(volume, [config.data_dir], `VOLUME is data_dir (${config.data_dir})`);
  t.equal(one('WORKDIR')?.args, config.data_dir, 'the working directory is the data volume');
  t.equal(`${runtimeEnv.get('XDG_DATA_HOME')}/headway`, config.data_dir, 'a config without data_dir still uses the volume (XDG_DATA_HOME)');
  t.match(runs, new RegExp(`chown ${user}:${user} ${config.data_dir}`), 'the volume belongs to the user');
  t.equal(config.unix_socket, `${config.data_dir}/headway.sock`, 'the socket `headway health` uses is in the volume');

  const exposed = runtime.body.filter((i) => i.op === 'EXPOSE').flatMap((i) => words(i.args));
  const wanted = [
    `${parseHostPort(config.listen_addr)!.port}`,
    `${parseHostPort(config.metrics_listen_addr)!.port}`,
    `${parseHostPort(config.grpc_listen_addr)!.port}`,
    `${parseHostPort(config.derp.server.tls_listen_addr)!.port}`,
    `${parseHostPort(config.derp.server.stun_listen_addr)!.port}/udp`,
  ];
  t.same(exposed.sort(), [...wanted].sort(), 'EXPOSE lists exactly the ports the config listens on');
  t.same(wanted, ['8080', '9090', '50443', '8443', '3478/udp']);
  for (const addr of [config.listen_addr, config.metrics_listen_addr, config.grpc_listen_addr, config.derp.server.stun_listen_addr, config.derp.server.tls_listen_addr]) {
    t.equal(parseHostPort(addr)!.host, '0.0.0.0', `${addr} binds every interface of the container`);
  }
  t.equal(config.log.format, 'json', 'the image logs JSON lines (stdout)');

  const health = one('HEALTHCHECK')!.args;
  const cmd = /CMD\s+(\[.*\])$/.exec(health);
  t.ok(cmd, `HEALTHCHECK has an exec-form CMD: ${health}`);
  t.same(JSON.parse(cmd![1]!), ['headway', 'health']);
  t.same(JSON.parse(one('ENTRYPOINT')!.args), ['headway', 'serve']);
  t.match(runs, /ln -s \/opt\/headway\/packages\/cli\/bin\/run\.js \/usr\/local\/bin\/headway/, '`headway` is on PATH');
  t.equal(one('STOPSIGNAL')?.args, 'SIGTERM');
});

t.test('compose.yaml: restart policy, the same ports, config read-only, a named data volume, a pinned tag', async (t) => {
  const services = Object.entries(compose.services);
  t.equal(services.length, 1);
  const [, svc] = services[0]!;
  t.equal(svc.restart, 'unless-stopped');
  const version = (JSON.parse(readFileSync(join(root, 'packages', 'cli', 'package.json'), 'utf8')) as { version: string }).version;
  t.equal(svc.image, `headway:${version}`, 'the image tag is the release version, not latest');
  t.ok(svc.build, 'compose can build the image from this repository');
  const exposed = runtime.body.filter((i) => i.op === 'EXPOSE').flatMap((i) => words(i.args));
  const { config } = loadConfig({ path: imageConfigPath, env: {}, home: '/nonexistent' });
  const published = (svc.ports ?? []).map((p) => {
    const m = /^(?:([\d.]+):)?(\d+):(\d+)(\/udp)?$/.exec(p);
    if (!m) throw new Error(`compose.yaml port ${p}`);
    t.equal(m[2], m[3], `${p}: the same port outside`);
    if (m[3] === `${parseHostPort(config.grpc_listen_addr)!.port}` && config.grpc_allow_insecure) {
      t.equal(m[1], '127.0.0.1', 'plaintext gRPC (grpc_allow_insecure) is published on the host loopback only');
    }
    return `${m[3]}${m[4] ?? ''}`;
  });
  t.same(published.sort(), [...exposed].sort(), 'every exposed port is published, and only those');

  const mounts = (svc.volumes ?? []).map((v) => v.split(':'));
  const cfgMount = mounts.find((m) => m[1] === '/etc/headway/config.yaml');
  t.ok(cfgMount, 'the config is mounted at /etc/headway/config.yaml');
  t.equal(cfgMount?.[2], 'ro', 'read-only');
  // ./config.yaml is in the CLI's own search path: the container's config there would send
  // \`headway nodes list\` in the checkout to the container's socket path.
  t.not(cfgMount?.[0], './config.yaml', 'the mounted file is not ./config.yaml, which the CLI in this directory would read');
  t.notOk(configSearchPath({ cwd: root, home: '/nonexistent', env: {} }).includes(join(root, cfgMount?.[0] ?? '')), 'nor any file the CLI searches');
  t.match(readFileSync(join(root, '.gitignore'), 'utf8'), new RegExp(`^${(cfgMount?.[0] ?? '').replace(/^\.\//, '').replace(/\./g, '\\.')}$`, 'm'), 'and git ignores it');
  const dataMount = mounts.find((m) => m[1] === config.data_dir);
  t.ok(dataMount, `a volume at data_dir ${config.data_dir}`);
  t.ok(dataMount && compose.volumes && dataMount[0]! in compose.volumes, 'a named volume (declared under volumes:)');
  const grace = Number(/^(\d+)s$/.exec(svc.stop_grace_period ?? '')?.[1] ?? 10);
  t.ok(grace >= 5, `the stop grace period (${grace} s) covers the 5 s shutdown`);
});
