#!/usr/bin/env node
// bundle: type-checks the console's browser code (web/, against the REST API's generated types) and bundles it with
// preact into one minified script and one style sheet under dist/web/, named by their content's hash so browsers may
// keep them forever; dist/web/index.html names them. The server reads dist/web at start (src/assets.ts).
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild-wasm';

const root = fileURLToPath(new URL('..', import.meta.url));
const require = createRequire(import.meta.url);
const tsc = join(dirname(require.resolve('typescript/package.json')), 'bin', 'tsc');
execFileSync(process.execPath, [tsc, '-p', join(root, 'web', 'tsconfig.json')], { stdio: 'inherit' });

const out = join(root, 'dist', 'web');
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const result = await esbuild.build({
  entryPoints: [join(root, 'web', 'main.tsx')],
  bundle: true,
  minify: true,
  format: 'esm',
  target: 'es2022',
  jsx: 'automatic',
  jsxImportSource: 'preact',
  legalComments: 'none',
  write: false,
  outdir: out,
  logLevel: 'warning',
});
const hashed = (name, ext, text) => {
  const file = `${name}-${createHash('sha256').update(text).digest('hex').slice(0, 12)}.${ext}`;
  writeFileSync(join(out, file), text);
  return file;
};
const js = result.outputFiles.find((f) => f.path.endsWith('.js'));
const script = hashed('console', 'js', js.contents);
// The shared sheet first, then each page's own (web/pages/*.css), in name order.
const pageSheets = readdirSync(join(root, 'web', 'pages')).filter((f) => f.endsWith('.css')).sort();
const css = [join(root, 'web', 'styles.css'), ...pageSheets.map((f) => join(root, 'web', 'pages', f))].map((f) => readFileSync(f, 'utf8')).join('\n');
const style = hashed('console', 'css', css);
const page = readFileSync(join(root, 'web', 'index.html'), 'utf8').replace('{{script}}', script).replace('{{style}}', style);
writeFileSync(join(out, 'index.html'), page);
writeFileSync(join(out, 'signin.html'), readFileSync(join(root, 'web', 'signin.html'), 'utf8').replace('{{style}}', style));
await esbuild.stop?.();
