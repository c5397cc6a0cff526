/**
 * The console's first load: the HTML, script and style sheet a browser fetches to show the first page, as bundled
 * in dist/web. Prints their sizes raw and gzipped, and fails when the gzipped total passes FIRST_LOAD_GZIP_LIMIT.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import t from 'tap';

/** FIRST_LOAD_GZIP_LIMIT: the console must open quickly on a phone's connection; Preact keeps it far below this. */
const FIRST_LOAD_GZIP_LIMIT = 60 * 1024;

const web = fileURLToPath(new URL('../../dist/web/', import.meta.url));

t.test('first load: index.html, the script and the style sheet', (t) => {
  let files: string[];
  try {
    files = readdirSync(web);
  } catch {
    t.fail(`no bundle in ${web}: run npm run build (node packages/console/scripts/bundle.mjs)`);
    return t.end();
  }
  const html = readFileSync(join(web, 'index.html'), 'utf8');
  // The files the page names, so a stale bundle left beside the current one is not counted.
  const named = [...html.matchAll(/\/admin\/assets\/([\w.-]+)/g)].map((m) => m[1]!);
  t.same(named.map((f) => f.split('.').pop()).sort(), ['css', 'js'], 'index.html names one script and one style sheet');
  for (const f of named) t.ok(files.includes(f), `${f} is in dist/web`);
  let raw = 0, gzip = 0;
  for (const f of ['index.html', ...named]) {
    const bytes = readFileSync(join(web, f));
    const z = gzipSync(bytes, { level: 9 }).length;
    raw += bytes.length;
    gzip += z;
    t.comment(`${f}: ${bytes.length} bytes, ${z} gzipped`);
  }
  t.comment(`first load: ${raw} bytes, ${gzip} gzipped (limit ${FIRST_LOAD_GZIP_LIMIT})`);
  t.ok(gzip <= FIRST_LOAD_GZIP_LIMIT, `the first load is ${(gzip / 1024).toFixed(1)} KB gzipped, at most ${FIRST_LOAD_GZIP_LIMIT / 1024} KB`);
  t.end();
});
