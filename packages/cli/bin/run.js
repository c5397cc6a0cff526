#!/usr/bin/env node
import { fileURLToPath } from 'node:url';
import { execute } from '@oclif/core';
import { ensureManifest } from '../dist/src/manifest.js';

// Node 24 is the supported runtime (zstd from node:zlib, better-sqlite3 13): an older one
// is refused here in one line, not by a missing export deep in the server.
if (Number(process.versions.node.split('.')[0]) < 24) {
  console.error(`headway needs Node.js 24 or newer; ${process.execPath} is ${process.version}`);
  process.exit(1);
}

// With a current oclif.manifest.json oclif imports only the command being run, not every
// command file; a development tree gets one written on its first run after a build.
await ensureManifest(fileURLToPath(new URL('..', import.meta.url)));
await execute({ dir: import.meta.url });
