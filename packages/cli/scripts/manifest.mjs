#!/usr/bin/env node
// manifest: writes oclif.manifest.json for the headway CLI (run before packing, and by the
// workspace build). Usage: node packages/cli/scripts/manifest.mjs
import { fileURLToPath } from 'node:url';
import { writeManifest } from '../dist/src/manifest.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const count = await writeManifest(root);
console.log(`oclif.manifest.json: ${count} commands`);
