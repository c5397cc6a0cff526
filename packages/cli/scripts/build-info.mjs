#!/usr/bin/env node
// build-info: records the commit a package is packed from in its build-info.json (npm
// prepack), so `headway version` names it where there is no git checkout; `--remove`
// deletes it again (npm postpack), so a source tree keeps asking git.
// Usage: node packages/cli/scripts/build-info.mjs [--remove]
import { rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { BUILD_INFO_FILE, gitDescribe } from '../dist/src/build-info.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const file = new URL(`../${BUILD_INFO_FILE}`, import.meta.url);
if (process.argv.includes('--remove')) {
  rmSync(file, { force: true });
} else {
  const commit = gitDescribe(root) ?? 'unknown';
  writeFileSync(file, JSON.stringify({ commit }, null, 2) + '\n');
  console.log(`${BUILD_INFO_FILE}: commit ${commit}`);
}
