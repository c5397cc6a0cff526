#!/usr/bin/env node
// Node 24 is the supported runtime (zstd from node:zlib, better-sqlite3 13): an older one
// is refused here in one line, not by a missing export deep in the server. The imports
// below are dynamic so that nothing is loaded before this check.
if (Number(process.versions.node.split('.')[0]) < 24) {
  console.error(`headway needs Node.js 24 or newer; ${process.execPath} is ${process.version}`);
  process.exit(1);
}

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
