import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

/** MemoryTrim gives the C heap's free pages back to the system; trim() says whether any were released. */
export interface MemoryTrim {
  trim(): boolean;
}

/** Where node-gyp puts the addon, relative to this file (dist/src/index.js). */
export const ADDON_PATH = fileURLToPath(new URL('../../build/Release/memtrim.node', import.meta.url));
/** Where the install script (scripts/addon-install.mjs) writes why the build failed: a summary line, then node-gyp's output. */
export const NOT_BUILT_PATH = fileURLToPath(new URL('../../build/not-built.txt', import.meta.url));

/**
 * loadMemoryTrim loads the compiled addon. It returns the reason instead when there is nothing to call: the
 * addon was not built (npm installs this package as optional; a checkout builds it with scripts/build-sqlite.sh;
 * buildFailed when the install tried and failed, with its reason) or the C library is not glibc.
 */
export function loadMemoryTrim(): MemoryTrim | { unavailable: string; buildFailed?: boolean } {
  if (!existsSync(ADDON_PATH)) {
    if (!existsSync(NOT_BUILT_PATH)) return { unavailable: `the memtrim addon was not built (${ADDON_PATH})` };
    const why = readFileSync(NOT_BUILT_PATH, 'utf8').split('\n', 1)[0];
    return { unavailable: `the memtrim addon failed to build at install: ${why} (${NOT_BUILT_PATH} has node-gyp's output)`, buildFailed: true };
  }
  let addon: { trim(): boolean | undefined };
  try {
    addon = createRequire(import.meta.url)(ADDON_PATH) as typeof addon;
  } catch (err) {
    return { unavailable: `the memtrim addon did not load: ${(err as Error).message}` };
  }
  if (typeof addon.trim !== 'function' || addon.trim() === undefined) return { unavailable: 'the C library is not glibc, which alone has malloc_trim' };
  return { trim: () => addon.trim() === true };
}
