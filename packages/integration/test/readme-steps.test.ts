/**
 * The README as a new user follows it, on a machine where Debian's Node 20 is the `node` on PATH: the first
 * command (`./scripts/serve.sh`), then the "Join a device" block (the `headway` alias, `headway users create`,
 * `headway preauthkeys create`, `tailscale up --login-server … --authkey …`) with a real tailscaled.
 *
 * The commands are read from README.md, not copied here, so the README cannot drift from what is tested.
 * Only the placeholders the README asks the reader to fill in are replaced: `<server>:8080` by the server's
 * address and `<key>` by the key `headway preauthkeys create` printed.
 *
 * Every command runs with PATH=/usr/bin:/bin (Debian's Node 20 first), HOME a fresh directory (so the server's
 * defaults, its data directory and admin socket in ~/.local/share/headway, are the test's own) and
 * HEADWAY_NODE_HOME the Node 24 running this test (so scripts/node-runtime.sh finds it instead of downloading
 * one). The one setting the README does not make is a config file where the server looks on its own
 * ($HOME/.headway/config.yaml) moving its ports off the defaults, which other servers on the machine may hold.
 *
 * serve.sh runs `npm ci` when node_modules/.headway-node-abi (written by scripts/build-sqlite.sh) does not name
 * the running Node's ABI or a native module is missing; that would replace node_modules under every test
 * running from this checkout, so the test does not start serve.sh then. Outside CI a missing precondition
 * (Node 20 on PATH, a Tailscale client, a tree built for Node 24) skips with the reason; under CI=true it fails.
 */
import t, { type Test } from 'tap';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { freePort } from '../src/ports.js';
import { unmet } from '../src/unmet.js';
import { cleanupStack, repoRoot, requireTailscale, TailscaleDevice } from '../src/tailscale.js';

const root = repoRoot();
const README = readFileSync(join(root, 'README.md'), 'utf8');

/** Bounds on steps that wait, so a hang fails with what was seen instead of running into tap's timeout. */
const SERVE_HEALTHY_MS = 480_000; // serve.sh builds (tsc -b) before it starts the server
const COMMAND_MS = 120_000;
const UP_MS = 120_000;
const STOP_MS = 30_000;

// ---------------------------------------------------------------------------------------------------------
// Reading the README

/** shBlocks returns the text of every fenced ```sh block, in order. */
function shBlocks(markdown: string): string[] {
  return [...markdown.matchAll(/^```sh[ \t]*\n([\s\S]*?)^```[ \t]*$/gm)].map((m) => m[1]!);
}

/** section returns a `## ` section's text, up to the next `## ` heading. */
function section(markdown: string, heading: string): string {
  const start = markdown.search(new RegExp(`^## ${heading.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}[ \\t]*$`, 'm'));
  if (start < 0) return '';
  const rest = markdown.slice(start + 3);
  const end = rest.search(/^## /m);
  return end < 0 ? markdown.slice(start) : markdown.slice(start, start + 3 + end);
}

/** commandLines are a block's commands: its non-empty lines that are not whole-line comments (a trailing `\` joins lines). */
function commandLines(block: string): string[] {
  return block.replace(/\\\n/g, ' ').split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'));
}

/**
 * shellWords splits one simple command as sh would (quotes, backslashes, a `#` comment) and refuses what
 * it would have to interpret beyond that (expansions, redirections, pipes, lists): such a line is not the
 * plain command this test can hand to a program's argv.
 */
function shellWords(line: string): string[] {
  const words: string[] = [];
  let word: string | undefined;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (c === ' ' || c === '\t') {
      if (word !== undefined) words.push(word);
      word = undefined;
    } else if (c === '#' && word === undefined) {
      break;
    } else if (c === "'") {
      const end = line.indexOf("'", i + 1);
      if (end < 0) throw new Error(`unterminated ' in: ${line}`);
      word = (word ?? '') + line.slice(i + 1, end);
      i = end;
    } else if (c === '"') {
      let text = '';
      for (i++; i < line.length && line[i] !== '"'; i++) {
        if (line[i] === '$' || line[i] === '`') throw new Error(`an expansion in: ${line}`);
        if (line[i] === '\\' && i + 1 < line.length && '"\\$`'.includes(line[i + 1]!)) i++;
        text += line[i];
      }
      if (i >= line.length) throw new Error(`unterminated " in: ${line}`);
      word = (word ?? '') + text;
    } else if (c === '\\') {
      if (i + 1 >= line.length) throw new Error(`a trailing \\ in: ${line}`);
      word = (word ?? '') + line[++i];
    } else if ('$`<>|;&(){}*?[]~'.includes(c)) {
      throw new Error(`shell syntax ${JSON.stringify(c)} in: ${line}`);
    } else {
      word = (word ?? '') + c;
    }
  }
  if (word !== undefined) words.push(word);
  return words;
}

// ---------------------------------------------------------------------------------------------------------
// Running commands as the user

interface Run { code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }

function run(file: string, args: string[], env: NodeJS.ProcessEnv, timeoutMs = COMMAND_MS): Promise<Run> {
  return new Promise((resolve) => {
    execFile(file, args, { cwd: root, env, timeout: timeoutMs, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      const e = err as (NodeJS.ErrnoException & { code?: unknown; signal?: NodeJS.Signals | null }) | null;
      const code = e === null ? 0 : typeof e.code === 'number' ? e.code : null;
      resolve({ code, signal: e?.signal ?? null, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

const show = (r: Run): string => `exit ${r.code ?? r.signal}${r.stderr.trim() || r.stdout.trim() ? `: ${(r.stderr.trim() || r.stdout.trim()).slice(-2000)}` : ''}`;


/** alive says whether any process of a process group is left. */
function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

function exited(child: ChildProcess, timeoutMs: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), timeoutMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------------------------------------

t.test('README: from ./scripts/serve.sh to a joined device, with Node 20 first on PATH', async (t) => {
  // 1. The first sh block: install and start the server, then run the tests.
  const first = shBlocks(README)[0];
  t.ok(first !== undefined, 'the README has a fenced sh block');
  const firstCommands = commandLines(first ?? '');
  t.equal(firstCommands.length, 2, `the first sh block has two commands: ${JSON.stringify(firstCommands)}`);
  const serveLine = firstCommands[0] ?? '';
  t.same(shellWords(serveLine), ['./scripts/serve.sh'], `the first installs and starts the server: ${serveLine}`);
  t.same(shellWords(firstCommands[1] ?? ''), ['npm', 'test'], `the second runs the tests: ${firstCommands[1]}`);

  // The "Join a device" block: the alias, `headway` commands, then `tailscale up`.
  const joinBlock = shBlocks(section(README, 'Join a device'))[0];
  t.ok(joinBlock !== undefined, 'the "## Join a device" section has a sh block');
  const joinCommands = commandLines(joinBlock ?? '');
  const aliasLine = joinCommands[0] ?? '';
  const headwayLines = joinCommands.slice(1, -1);
  const upLine = joinCommands.at(-1) ?? '';
  t.match(aliasLine, /^alias headway=/, `it starts with the alias: ${aliasLine}`);
  t.ok(headwayLines.length > 0 && headwayLines.every((l) => l.startsWith('headway ')), `then headway commands: ${JSON.stringify(headwayLines)}`);
  t.match(headwayLines[0] ?? '', /^headway users create alice(\s|$)/, 'the first creates the user alice');
  const keyLines = headwayLines.filter((l) => /^headway preauthkeys create(\s|$)/.test(l));
  t.equal(keyLines.length, 1, 'one of them creates the pre-auth key');
  t.match(upLine, /^tailscale up\s/, `it ends with tailscale up: ${upLine}`);
  t.equal(upLine.split('<server>:8080').length, 2, 'tailscale up names <server>:8080 once');
  t.equal(upLine.split('<key>').length, 2, 'tailscale up names <key> once');
  if (t.passing() === false || first === undefined || joinBlock === undefined) return;

  // 2. Preconditions: the situation the test is about, and a tree serve.sh will not reinstall.
  const node24Home = dirname(dirname(process.execPath));
  // Run in reverse at the end: the device, then the server, then its HOME.
  const cleanups = cleanupStack(t);
  const home = mkdtempSync(join(tmpdir(), 'hw-readme-home-'));
  cleanups.push(() => rmSync(home, { recursive: true, force: true }));
  const userEnv: NodeJS.ProcessEnv = { PATH: '/usr/bin:/bin', HOME: home, HEADWAY_NODE_HOME: node24Home, LANG: 'C.UTF-8' };
  if (process.env.TMPDIR) userEnv.TMPDIR = process.env.TMPDIR;

  if (process.versions.node.split('.')[0] !== '24') {
    unmet(t, `this test runs on Node ${process.version}; node-runtime.sh accepts only a Node 24 in HEADWAY_NODE_HOME and would download one`);
    return;
  }
  const nodeV = await run('bash', ['-c', 'node -v'], userEnv, 30_000);
  const major = Number(/^v(\d+)\./.exec(nodeV.stdout.trim())?.[1] ?? NaN);
  if (nodeV.code !== 0 || !(major < 24)) {
    unmet(t, nodeV.code !== 0
      ? `no node on PATH=/usr/bin:/bin (${show(nodeV)}): the README's Debian Node 20 situation is not on this machine`
      : `node on PATH=/usr/bin:/bin is ${nodeV.stdout.trim()}, not older than 24: outside the Node 20 situation this test proves nothing`);
    return;
  }
  t.comment(`node on PATH=/usr/bin:/bin is ${nodeV.stdout.trim()}; Node 24 home ${node24Home}`);
  if (requireTailscale(t).length === 0) return;
  if (existsSync('/etc/headway/config.yaml')) {
    unmet(t, '/etc/headway/config.yaml exists: the server would read it before $HOME/.headway/config.yaml');
    return;
  }
  const abiMarker = join(root, 'node_modules', '.headway-node-abi');
  const markerAbi = existsSync(abiMarker) ? readFileSync(abiMarker, 'utf8').trim() : undefined;
  const natives = ['node_modules/better-sqlite3/build/Release/better_sqlite3.node', 'packages/memtrim/build/Release/memtrim.node', 'packages/aead/build/Release/aead.node'];
  const missing = natives.filter((p) => !existsSync(join(root, p)));
  if (markerAbi !== process.versions.modules || missing.length > 0) {
    const why = missing.length > 0 ? `${missing.join(', ')} missing`
      : markerAbi === undefined ? `${abiMarker} missing` : `${abiMarker} says ABI ${markerAbi}, Node 24 is ${process.versions.modules}`;
    unmet(t, `${why}: serve.sh would run \`npm ci\` and replace node_modules under this test run; run \`bash scripts/build-sqlite.sh\` with Node 24 first on PATH`);
    return;
  }

  // The server's config, where it looks on its own: its ports off the defaults, everything else default.
  const port = await freePort();
  const address = `127.0.0.1:${port}`;
  mkdirSync(join(home, '.headway'));
  writeFileSync(join(home, '.headway', 'config.yaml'), [
    `server_url: http://${address}`,
    `listen_addr: ${address}`,
    'metrics_listen_addr: 127.0.0.1:0',
    'grpc_listen_addr: ""',
    'derp:',
    '  server:',
    '    stun_listen_addr: 127.0.0.1:0',
    '',
  ].join('\n'));

  // 3. The first command, as written, from the repository root.
  t.comment(`running: ${serveLine}`);
  const server = spawn('bash', ['-c', serveLine], { cwd: root, env: userEnv, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let serverOutput = '';
  const keep = (chunk: Buffer): void => {
    serverOutput = (serverOutput + chunk.toString()).slice(-64_000);
  };
  server.stdout.on('data', keep);
  server.stderr.on('data', keep);
  let serverExit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  server.once('exit', (code, signal) => {
    serverExit = { code, signal };
  });
  const pgid = server.pid!;
  cleanups.push(async () => {
    // A failed test stops here: SIGTERM, then SIGKILL for whatever of serve.sh is left.
    if (!groupAlive(pgid)) return;
    process.kill(-pgid, 'SIGTERM');
    if (!(await exited(server, STOP_MS)) || groupAlive(pgid)) process.kill(-pgid, 'SIGKILL');
  });

  let healthy = false;
  let lastHealth = 'no answer';
  const deadline = Date.now() + SERVE_HEALTHY_MS;
  while (!healthy && serverExit === undefined && Date.now() < deadline) {
    try {
      const res = await fetch(`http://${address}/health`, { signal: AbortSignal.timeout(5000) });
      const body = await res.text();
      lastHealth = `${res.status} ${body.trim()}`;
      healthy = res.status === 200 && (JSON.parse(body) as { status?: string }).status === 'pass';
    } catch (err) {
      lastHealth = (err as Error).message;
    }
    if (!healthy) await sleep(500);
  }
  if (!healthy) {
    t.fail(serverExit !== undefined
      ? `${serveLine} exited (${serverExit.code ?? serverExit.signal}) before /health answered`
      : `/health on ${address} did not pass within ${SERVE_HEALTHY_MS / 1000} s (last: ${lastHealth})`);
    t.comment(serverOutput.slice(-8000));
    return;
  }
  t.pass(`${serveLine}: http://${address}/health is {"status":"pass"}`);
  t.comment(`serve.sh so far:\n${serverOutput.trim().split('\n').slice(0, 12).join('\n')}`);
  t.ok(existsSync(join(home, '.local', 'share', 'headway', 'headway.sock')), 'its admin socket is in the default data directory, ~/.local/share/headway');

  // 4. The "Join a device" commands, each after the alias, in bash with aliases on, from the repository root.
  const headway = async (line: string): Promise<Run> => {
    const script = join(home, 'step.sh');
    writeFileSync(script, `shopt -s expand_aliases\n${aliasLine}\n${line}\n`);
    const r = await run('bash', [script], userEnv);
    const out = (r.stdout.trim() || r.stderr.trim()).split('\n');
    t.comment(`${line}\n  -> exit ${r.code ?? r.signal}: ${out.slice(0, 3).join(' ')}${out.length > 3 ? ' …' : ''}`);
    return r;
  };
  let key: string | undefined;
  for (const line of headwayLines) {
    const r = await headway(line);
    t.equal(r.code, 0, `${line}: exits 0${r.code === 0 ? '' : ` (${show(r)})`}`);
    if (r.code !== 0) {
      t.comment(serverOutput.slice(-4000));
      return;
    }
    if (keyLines.includes(line)) {
      const lines = r.stdout.trim().split('\n');
      t.equal(lines.length, 1, `it prints one line, the key: ${JSON.stringify(r.stdout)}`);
      t.match(lines[0], /^[A-Za-z0-9_-]{16,}$/, 'a key that can be pasted into the shell as it is');
      key = lines[0]!.trim();
    }
  }
  if (key === undefined || t.passing() === false) return;

  // 5. `tailscale up` exactly as written, with the server's address and the key filled in.
  const upArgs = shellWords(upLine.replace('<server>:8080', address).replace('<key>', key));
  t.equal(upArgs[0], 'tailscale', 'the line runs the tailscale CLI');
  const device = await TailscaleDevice.start({ name: 'readme' });
  cleanups.push(() => device.stop());
  t.comment(`tailscale ${device.binaries.version}: ${upArgs.join(' ')}`);
  const up = await device.cli(upArgs.slice(1), { timeoutMs: UP_MS });
  const upOk = up.code === 0 && !up.timedOut;
  t.ok(upOk, `tailscale ${upArgs.slice(1).join(' ')}: exits 0${upOk ? '' : ` (${up.timedOut ? 'timed out' : `exit ${up.code ?? up.signal}`}: ${(up.stderr.trim() || up.stdout.trim()).slice(-1000)})`}`);
  if (!upOk) {
    t.comment(device.logTail());
    return;
  }
  const st = await device.status();
  t.equal(st.BackendState, 'Running', 'the device is Running');

  const listed = await headway('headway nodes list -o json');
  t.equal(listed.code, 0, 'headway nodes list -o json: exits 0');
  const nodes = JSON.parse(listed.stdout) as Array<{ id: unknown; node_key: string; user: { name: string } | null }>;
  t.equal(nodes.length, 1, 'one node');
  t.equal(nodes[0]?.node_key, st.Self?.PublicKey, 'it is the device (its node key)');
  t.equal(nodes[0]?.user?.name, 'alice', 'owned by alice');
  t.equal(String(nodes[0]?.id), st.Self?.ID, 'the node id the device runs as');

  // 6. The server stops on SIGTERM.
  await device.stop();
  process.kill(-pgid, 'SIGTERM');
  t.ok(await exited(server, STOP_MS), 'the server exits on SIGTERM');
  t.same(serverExit, { code: 0, signal: null }, 'with status 0');
  for (let i = 0; i < 20 && groupAlive(pgid); i++) await sleep(250);
  t.notOk(groupAlive(pgid), 'nothing serve.sh started is left');
});
