/**
 * The documentation as a site: `mkdocs build --strict` (Debian's mkdocs, mkdocs.yml at the repository root)
 * builds docs/ into a page per nav entry, and scripts/check-doc-links.mjs finds no broken link or anchor in
 * README.md and docs/ (what mkdocs does not check: anchors, links leaving docs/, the README). The built
 * site's own links and anchors are followed too, and it loads nothing from another host.
 *
 * Without mkdocs the site tests skip with the reason; under CI=true, where .ci/run installs it with apt,
 * a missing mkdocs fails. The README's first commands themselves are readme-steps.test.ts's; here only
 * that the README stays short and opens with them.
 */
import t, { type Test } from 'tap';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';
import { pathToFileURL } from 'node:url';
import YAML from 'yaml';
import { repoRoot } from '../src/tailscale.js';
import { unmet } from '../src/unmet.js';

const root = repoRoot();
/** The checker's functions this test uses (typed here: the image's build stage compiles the tests without scripts/). */
interface DocLinks {
  anchorsOf(markdown: string): { github: Set<string>; mkdocs: Set<string> };
  checkFiles(files: string[], root?: string): string[];
}
const links = await import(pathToFileURL(join(root, 'scripts', 'check-doc-links.mjs')).href) as DocLinks;

interface Ran { code: number | null; stdout: string; stderr: string }

function run(cmd: string, args: string[], timeoutMs = 120_000): Promise<Ran> {
  return new Promise((resolve) => {
    execFile(cmd, args, { cwd: root, timeout: timeoutMs, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      const e = err as (NodeJS.ErrnoException & { code?: unknown }) | null;
      const code = e === null ? 0 : typeof e.code === 'number' ? e.code : null;
      resolve({ code, stdout: String(stdout), stderr: String(stderr || (e && typeof e.code !== 'number' ? e.message : '')) });
    });
  });
}

function which(name: string): string | undefined {
  return (process.env.PATH ?? '').split(':').concat(['/usr/bin']).map((d) => join(d, name)).find((p) => p.startsWith('/') && existsSync(p));
}


/** The nav of mkdocs.yml as a list of markdown paths (sections flattened), in reading order. */
function navPages(nav: unknown): string[] {
  if (typeof nav === 'string') return [nav];
  if (Array.isArray(nav)) return nav.flatMap(navPages);
  if (typeof nav === 'object' && nav !== null) return Object.values(nav).flatMap(navPages);
  return [];
}

/** The built file of a page (use_directory_urls, mkdocs' default): install.md → install/index.html. */
const builtPath = (page: string): string => (page === 'index.md' || page.endsWith('/index.md') ? page.replace(/\.md$/, '.html') : page.replace(/\.md$/, '/index.html'));

const config = YAML.parse(readFileSync(join(root, 'mkdocs.yml'), 'utf8')) as { docs_dir?: string; strict?: boolean; site_dir?: string; nav?: unknown; theme?: { highlightjs?: boolean } };
const docsDir = config.docs_dir ?? 'docs';
const pages = navPages(config.nav);

t.test('README: short, and opens with the two set-up commands', async (t) => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const lines = readme.split('\n').length - (readme.endsWith('\n') ? 1 : 0);
  t.ok(lines <= 200, `README.md has ${lines} lines (at most 200: the rest belongs in ${docsDir}/)`);
  const firstSh = /^```sh[ \t]*\n([\s\S]*?)^```[ \t]*$/m.exec(readme);
  const firstSection = readme.search(/^## /m);
  t.ok(firstSh !== null && (firstSection < 0 || firstSh.index < firstSection), 'its first sh block comes before the first section');
  // Which two commands they are (./scripts/serve.sh, npm test), and that they work, is readme-steps.test.ts's.
  const commands = (firstSh?.[1] ?? '').split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'));
  t.equal(commands.length, 2, `it has the two set-up commands: ${JSON.stringify(commands.map((c) => c.replace(/\s+#.*$/, '')))}`);
});

t.test('mkdocs.yml: strict, a nav that holds every page of docs/, nothing loaded from elsewhere', async (t) => {
  t.equal(config.strict, true, 'strict: true, so a plain `mkdocs build` fails on a warning too');
  t.equal(docsDir, 'docs', 'docs_dir: docs');
  const siteDir = config.site_dir ?? 'site';
  const ignored = readFileSync(join(root, '.gitignore'), 'utf8').split('\n').map((l) => l.trim());
  t.ok(ignored.includes(`${siteDir}/`) || ignored.includes(siteDir), `its site_dir ${siteDir}/ is in .gitignore`);
  t.equal(config.theme?.highlightjs, false, 'highlightjs off (the themes would load it from a CDN)');
  t.equal(pages[0], 'index.md', 'the nav starts at the home page');
  const onDisk = readdirSync(join(root, docsDir), { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.md')).map((f) => f.split('\\').join('/')).sort();
  t.same([...pages].sort(), onDisk, 'the nav lists every page of docs/ once');
});

t.test('scripts/check-doc-links.mjs: no broken link or anchor in README.md and docs/', async (t) => {
  const r = await run(process.execPath, [join(root, 'scripts', 'check-doc-links.mjs')]);
  t.equal(r.code, 0, `it exits 0${r.code === 0 ? '' : `:\n${r.stdout}${r.stderr}`}`);
  t.match(r.stdout, /^\d+ files, \d+ links: all resolve$/m, r.stdout.trim().split('\n').at(-1) ?? '');
});

t.test('scripts/check-doc-links.mjs finds what is broken, and fetches nothing', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hw-doclinks-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(join(dir, 'docs'));
  mkdirSync(join(dir, 'packages'));
  writeFileSync(join(dir, 'README.md'), [
    '# Top',
    '[ok](docs/a.md#b-c) [ok dir](packages) [external, never fetched](https://unreachable.invalid/x)',
    '[missing](docs/nope.md) [bad anchor](docs/a.md#nope) `[in code](nope.md)`',
    '```sh',
    'echo [in a fence](nope.md)',
    '```',
    '[ref]: docs/gone.md',
    '',
  ].join('\n'));
  writeFileSync(join(dir, 'docs', 'a.md'), [
    '# A',
    '## A -- B',
    '## B c',
    '[github only](#a----b) [site only](#a-b) [both](#b-c) [leaves the site](../README.md) [self](#a)',
    '',
  ].join('\n'));
  const problems = links.checkFiles(['README.md', 'docs/a.md'], dir);
  const expected = [
    /^README\.md:3: docs\/nope\.md: docs\/nope\.md does not exist$/,
    /^README\.md:3: docs\/a\.md#nope: docs\/a\.md has no heading #nope/,
    /^README\.md:7: docs\/gone\.md: docs\/gone\.md does not exist$/,
    /^docs\/a\.md:4: #a----b: .*GitHub's anchor, but on the site/,
    /^docs\/a\.md:4: #a-b: docs\/a\.md has no heading #a-b/,
    /^docs\/a\.md:4: \.\.\/README\.md: leaves docs\//,
  ];
  t.equal(problems.length, expected.length, `exactly the broken ones:\n${problems.join('\n')}`);
  for (const re of expected) t.ok(problems.some((p) => re.test(p)), `reported: ${re.source}`);
});

t.test('mkdocs build --strict: a page per nav entry, every link and anchor of the site resolves', async (t) => {
  const mkdocs = which('mkdocs');
  if (mkdocs === undefined) {
    unmet(t, 'mkdocs is not installed (apt-get install mkdocs)');
    return;
  }
  const version = await run(mkdocs, ['--version']);
  t.comment(version.stdout.trim());
  const site = mkdtempSync(join(tmpdir(), 'hw-docsite-'));
  t.teardown(() => rmSync(site, { recursive: true, force: true }));
  const built = await run(mkdocs, ['build', '--strict', '--site-dir', site]);
  t.equal(built.code, 0, `mkdocs build --strict exits 0${built.code === 0 ? '' : `:\n${built.stderr.slice(-3000)}`}`);
  if (built.code !== 0) return;
  const warnings = built.stderr.split('\n').filter((l) => /^(WARNING|ERROR)\b/.test(l));
  t.same(warnings, [], 'no warnings');
  t.ok(existsSync(join(site, 'index.html')), 'index.html');
  for (const page of pages) t.ok(existsSync(join(site, builtPath(page))), `${page} → ${builtPath(page)}`);
  if (!t.passing()) return;

  // The ids mkdocs gave the headings are the ones the link checker computes for the site.
  const html = new Map<string, string>();
  const read = (file: string): string => {
    if (!html.has(file)) html.set(file, readFileSync(join(site, file), 'utf8'));
    return html.get(file)!;
  };
  const idsOf = (file: string): Set<string> => new Set([...read(file).matchAll(/\sid="([^"]+)"/g)].map((m) => m[1]!));
  for (const page of pages) {
    // The page's content: from the theme's main column to its footer (the search and keyboard dialogs have headings too).
    const content = /role="main">([\s\S]*?)<footer/.exec(read(builtPath(page)))?.[1] ?? '';
    const headingIds = [...content.matchAll(/<h[1-6][^>]*\sid="([^"]+)"/g)].map((m) => m[1]!);
    const computed = [...links.anchorsOf(readFileSync(join(root, docsDir, page), 'utf8')).mkdocs];
    t.same(headingIds, computed, `${page}: the heading ids are the checker's (${computed.join(', ')})`);
  }

  // Every relative href and src of the built pages, and every url() of their stylesheets, names a file of
  // the site, and its #fragment an id there.
  const broken: string[] = [];
  const external: string[] = [];
  const stylesheets = new Set<string>();
  let followed = 0;
  const follow = (from: string, url: string, tag: string): void => {
    if (url.startsWith('data:')) return;
    if (/^[a-z][a-z0-9+.-]*:|^\/\//i.test(url)) {
      if (tag !== 'a') external.push(`${from}: <${tag}> ${url}`);
      return;
    }
    followed++;
    const [path = '', fragment] = url.replace(/\?[^#]*/, '').split('#');
    let target = path === '' ? from : posix.normalize(posix.join(posix.dirname(from), decodeURIComponent(path)));
    if (existsSync(join(site, target)) && statSync(join(site, target)).isDirectory()) target = posix.join(target, 'index.html');
    if (target.startsWith('..') || !existsSync(join(site, target))) {
      broken.push(`${from}: ${url} (no ${target})`);
    } else if (fragment && target.endsWith('.html') && !idsOf(target).has(decodeURIComponent(fragment))) {
      broken.push(`${from}: ${url} (no id ${fragment} in ${target})`);
    } else if (tag === 'link' && target.endsWith('.css')) {
      stylesheets.add(target);
    }
  };
  for (const page of pages) {
    const file = builtPath(page);
    // Conditional comments (<!--[if lt IE 9]> …) are no part of the page for a browser of today.
    const text = read(file).replace(/<!--[\s\S]*?-->/g, '');
    for (const m of text.matchAll(/<(a|link|script|img)\s[^>]*?\b(?:href|src)="([^"]*)"/g)) follow(file, m[2]!, m[1]!);
  }
  for (const css of stylesheets) {
    for (const m of readFileSync(join(site, css), 'utf8').matchAll(/url\(\s*(['"]?)([^'")]*)\1\s*\)/g)) follow(css, m[2]!, 'css url()');
  }
  t.ok(followed > pages.length * 10, `${followed} relative links and assets followed`);
  t.same(broken, [], 'every one resolves');
  t.same(external, [], 'no script, stylesheet or image from another host: the site works offline');
  for (const f of ['search_index.json', 'main.js', 'worker.js', 'lunr.js']) t.ok(existsSync(join(site, 'search', f)), `search/${f}: the search runs in the browser, offline`);
});
