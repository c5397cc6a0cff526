#!/usr/bin/env node
// manifest: writes oclif.manifest.json for the headway CLI, or for the plugin package whose
// directory is given (run before packing each package).
// Usage: node packages/cli/scripts/manifest.mjs [plugin-directory]
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeManifest } from '../dist/src/manifest.js';

const root = process.argv[2] ? resolve(process.argv[2]) : fileURLToPath(new URL('..', import.meta.url));
const count = await writeManifest(root);
console.log(`${root}/oclif.manifest.json: ${count} commands`);
