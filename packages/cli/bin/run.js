#!/usr/bin/env node
import { fileURLToPath } from 'node:url';
import { execute } from '@oclif/core';
import { ensureManifests, loadCliConfig, shareHostLibrary } from '../dist/src/launch.js';

const root = fileURLToPath(new URL('..', import.meta.url));
// Installed plugins import @headway/cli and @oclif/core from this CLI (see launch.ts).
shareHostLibrary();
// With current manifests oclif imports only the command being run, not every command
// file; a development tree gets them rewritten on its first run after a build.
await ensureManifests(root);
await execute({ loadOptions: await loadCliConfig(root) });
