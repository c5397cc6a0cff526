#!/usr/bin/env node
// Node 24 is the supported runtime (zstd from node:zlib, better-sqlite3 13). On an older one
// this file runs itself again under the Node 24 that scripts/serve.sh (scripts/node-runtime.sh)
// installs, when there is one; otherwise it stops in one line saying how to get one. The
// imports below are dynamic so that nothing is loaded before this check.
if (Number(process.versions.node.split('.')[0]) < 24) {
  const { existsSync } = await import('node:fs');
  const { join } = await import('node:path');
  const { spawn } = await import('node:child_process');
  const home = process.env.HEADWAY_NODE_HOME || join(process.env.HOME || '', '.cache', 'headway', 'node-24');
  const node24 = join(home, 'bin', 'node');
  if (!existsSync(node24)) {
    console.error(`headway needs Node.js 24 or newer; ${process.execPath} is ${process.version}, and there is no Node 24 in ${home} ` +
      '(./scripts/serve.sh installs one there, or set HEADWAY_NODE_HOME to a Node 24 install)');
    process.exit(1);
  }
  const child = spawn(node24, [...process.execArgv, ...process.argv.slice(1)], { stdio: 'inherit' });
  // `headway serve` under systemd or docker is stopped with a signal to this process: the server must hear it.
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => child.kill(sig));
  child.on('error', (err) => { console.error(`headway: cannot run ${node24}: ${err.message}`); process.exit(1); });
  child.on('exit', (code, signal) => process.exit(code ?? (signal ? 128 : 1)));
} else {
  const { fileURLToPath } = await import('node:url');
  const { execute } = await import('@oclif/core');
  const { ensureManifests, loadCliConfig, shareHostLibrary } = await import('../dist/src/launch.js');

  const root = fileURLToPath(new URL('..', import.meta.url));
  // Installed plugins import @headway/cli and @oclif/core from this CLI (see launch.ts).
  shareHostLibrary();
  // With current manifests oclif imports only the command being run, not every command
  // file; a development tree gets them rewritten on its first run after a build.
  await ensureManifests(root);
  await execute({ loadOptions: await loadCliConfig(root) });
}
