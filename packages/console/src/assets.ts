import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** ConsoleAssets are the bundled pages (scripts/bundle.mjs): the document, the sign-in page, and its hashed files. */
export interface ConsoleAssets {
  index: string;
  signin: string;
  files: Map<string, { body: Buffer; type: string }>;
}

const TYPES: Record<string, string> = { js: 'text/javascript; charset=utf-8', css: 'text/css; charset=utf-8', svg: 'image/svg+xml', png: 'image/png' };

/** WEB_DIR: where the bundle lies in this package (dist/web, beside dist/src). */
export const WEB_DIR = fileURLToPath(new URL('../web/', import.meta.url));

/** loadAssets reads the bundle once (a few tens of KB); undefined when the package was not bundled (`npm run build` does). */
export function loadAssets(dir = WEB_DIR): ConsoleAssets | undefined {
  if (!existsSync(join(dir, 'index.html'))) return undefined;
  const files = new Map<string, { body: Buffer; type: string }>();
  for (const name of readdirSync(dir)) {
    const ext = name.slice(name.lastIndexOf('.') + 1);
    if (name.endsWith('.html') || !TYPES[ext]) continue;
    files.set(name, { body: readFileSync(join(dir, name)), type: TYPES[ext]! });
  }
  return { index: readFileSync(join(dir, 'index.html'), 'utf8'), signin: readFileSync(join(dir, 'signin.html'), 'utf8'), files };
}
