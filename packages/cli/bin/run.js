#!/usr/bin/env node
import { fileURLToPath } from 'node:url';
import { execute } from '@oclif/core';
import { ensureManifest } from '../dist/src/manifest.js';

// With a current oclif.manifest.json oclif imports only the command being run, not every
// command file; a development tree gets one written on its first run after a build.
await ensureManifest(fileURLToPath(new URL('..', import.meta.url)));
await execute({ dir: import.meta.url });
