// check-doc-links.mjs checks the links of README.md and docs/ that `mkdocs build --strict` does not:
// every relative link resolves to a file or directory in the checkout, every `#anchor` names a heading of
// its target, and a page of the site (docs/) links nowhere outside docs/ (the site has only docs/ in it).
// External links (http:, https:, mailto:, …) are skipped, never fetched: the check runs offline.
//   node scripts/check-doc-links.mjs [FILE.md ...]     (default: README.md and every .md under docs/)
// It prints one line per problem (`file:line: link: reason`) and exits 1 when there is one.
//
// A script of its own rather than a library: markdown-link-check fetches external links and checks
// anchors only within the same file; remark-validate-links works offline but brings unified-engine's
// dozens of packages and knows only GitHub's heading slugs. A page in docs/ is read both on GitHub and
// on the site, where Python-Markdown's toc extension makes the ids, so an anchor into docs/ must be a
// heading under both schemes (they differ for runs of spaces or hyphens, non-ASCII letters, repeats).
// packages/integration/test/docs-site.test.ts compares these ids with the ones of the built site.
import { existsSync, readFileSync, readdirSync, realpathSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
/** The site's source (mkdocs.yml's docs_dir). */
const DOCS_DIR = 'docs';

/** blankCode replaces fenced code blocks and code spans by spaces, keeping every line where it was. */
export function blankCode(markdown) {
  const lines = markdown.split('\n');
  let fence;
  for (let i = 0; i < lines.length; i++) {
    const open = /^ {0,3}(`{3,}|~{3,})/.exec(lines[i]);
    if (fence === undefined) {
      if (open && !(open[1][0] === '`' && lines[i].slice(open.index + open[0].length).includes('`'))) {
        fence = open[1];
        lines[i] = '';
      }
    } else {
      if (open && open[1][0] === fence[0] && open[1].length >= fence.length && lines[i].trim() === open[1]) fence = undefined;
      lines[i] = '';
    }
  }
  const blank = (s) => s.replace(/[^\n]/g, ' ');
  return lines.join('\n')
    .replace(/<!--[\s\S]*?-->/g, blank)
    // A code span ends at the same run of backticks, within its paragraph (never across a blank line).
    .replace(/(`+)((?:[^\n]|\n(?![ \t]*\n))*?[^`])\1(?!`)/g, blank);
}

/** headingTexts lists the text of every ATX and setext heading outside code, in order, as a reader sees it. */
export function headingTexts(markdown) {
  const lines = blankCode(markdown.replace(/\r\n?/g, '\n')).split('\n');
  // The code spans are blanked in `lines` only to find headings; their text is read from the original.
  const original = markdown.replace(/\r\n?/g, '\n').split('\n');
  const texts = [];
  for (let i = 0; i < lines.length; i++) {
    if (/^ {0,3}#{1,6}(?:[ \t]|$)/.test(lines[i])) {
      texts.push(inlineText(original[i].replace(/^ {0,3}#{1,6}[ \t]*/, '').replace(/(^|[ \t]+)#+[ \t]*$/, '')));
    } else if (i > 0 && /^ {0,3}(=+|-+)[ \t]*$/.test(lines[i]) && isParagraphLine(lines[i - 1])) {
      // A setext heading: the paragraph above the underline, back to the blank line before it.
      let start = i - 1;
      while (start > 0 && isParagraphLine(lines[start - 1])) start--;
      texts.push(inlineText(original.slice(start, i).map((l) => l.trim()).join(' ')));
    }
  }
  return texts;
}

/** isParagraphLine: a line that can be part of a paragraph (not blank, a list item, a heading, a quote or a table row). */
function isParagraphLine(line) {
  return line.trim() !== '' && !/^ {0,3}([-*+]|\d+[.)])[ \t]|^ {0,3}#|^ {0,3}>|^ {0,3}\||^ {0,3}(=+|-+)[ \t]*$/.test(line);
}

/** inlineText is a heading's text without its markup: code spans' content, link and image text, no emphasis or tags. */
function inlineText(source) {
  return source
    .replace(/(`+)(?!`)([\s\S]*?[^`])\1(?!`)/g, (_, _ticks, code) => `\u0000${Buffer.from(code.trim()).toString('hex')}\u0000`)
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/!?\[([^\]]*)\]\[[^\]]*\]/g, '$1')
    .replace(/<[^>]+>/g, '')
    .replace(/\*+|(^|[^\p{L}\p{N}])_+|_+(?=[^\p{L}\p{N}]|$)/gu, '$1')
    .replace(/\\([!-/:-@[-`{-~])/g, '$1')
    .replace(/&(amp|lt|gt|quot|#39);/g, (_, e) => ({ amp: '&', lt: '<', gt: '>', quot: '"', '#39': "'" })[e])
    .replace(/\u0000([0-9a-f]*)\u0000/g, (_, hex) => Buffer.from(hex, 'hex').toString())
    .trim();
}

/** githubSlug is GitHub's anchor for a heading (github-slugger): lower case, punctuation dropped, each space a hyphen. */
export function githubSlug(text) {
  return text.toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '').replace(/ /g, '-');
}

/** mkdocsSlug is the id Python-Markdown's toc extension (mkdocs' default) gives a heading. */
export function mkdocsSlug(text) {
  const ascii = text.normalize('NFKD').replace(/[^\x00-\x7f]/g, '');
  return ascii.replace(/[^\w\s-]/g, '').trim().toLowerCase().replace(/[-\s]+/g, '-');
}

/** anchorsOf gives a markdown text's heading anchors under both schemes, with their rules for repeated headings. */
export function anchorsOf(markdown) {
  const github = new Set();
  const mkdocs = new Set();
  for (const text of headingTexts(markdown)) {
    const g = githubSlug(text);
    let gid = g;
    for (let n = 1; github.has(gid); n++) gid = `${g}-${n}`;
    github.add(gid);
    let mid = mkdocsSlug(text);
    while (mid === '' || mkdocs.has(mid)) {
      const m = /^(.*)_([0-9]+)$/.exec(mid);
      mid = m ? `${m[1]}_${Number(m[2]) + 1}` : `${mid}_1`;
    }
    mkdocs.add(mid);
  }
  // Explicit HTML anchors count under both.
  for (const m of blankCode(markdown).matchAll(/<a\s[^>]*\b(?:id|name)\s*=\s*["']([^"']+)["']/gi)) {
    github.add(m[1]);
    mkdocs.add(m[1]);
  }
  return { github, mkdocs };
}

/** linksOf lists every link target outside code: inline links and images, reference definitions, HTML href/src. */
export function linksOf(markdown) {
  const text = blankCode(markdown.replace(/\r\n?/g, '\n'));
  const lineAt = (index) => text.slice(0, index).split('\n').length;
  const found = [];
  const inline = /\]\(\s*(<[^>\n]*>|(?:[^\s()]|\([^\s()]*\))*)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)/g;
  for (const m of text.matchAll(inline)) found.push({ target: m[1].replace(/^<|>$/g, ''), line: lineAt(m.index) });
  for (const m of text.matchAll(/^ {0,3}\[[^\]\n]+\]:[ \t]*(<[^>\n]*>|\S+)/gm)) found.push({ target: m[1].replace(/^<|>$/g, ''), line: lineAt(m.index) });
  for (const m of text.matchAll(/<[a-z][^>]*\s(?:href|src)\s*=\s*["']([^"']*)["']/gi)) found.push({ target: m[1], line: lineAt(m.index) });
  return found.sort((a, b) => a.line - b.line);
}

const isExternal = (target) => /^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('//');
const inside = (dir, path) => path === dir || path.startsWith(dir + sep);

/** checkFiles checks the links of the given markdown files (paths relative to root); returns the problems found. */
export function checkFiles(files, root = ROOT) {
  const docsDir = join(root, DOCS_DIR);
  const anchorCache = new Map();
  const anchors = (path) => {
    if (!anchorCache.has(path)) anchorCache.set(path, anchorsOf(readFileSync(path, 'utf8')));
    return anchorCache.get(path);
  };
  const problems = [];
  for (const file of files) {
    const path = resolve(root, file);
    const markdown = readFileSync(path, 'utf8');
    for (const { target, line } of linksOf(markdown)) {
      const where = `${relative(root, path)}:${line}: ${target}`;
      if (isExternal(target)) continue;
      if (target.startsWith('/')) {
        problems.push(`${where}: an absolute path; write it relative to the file`);
        continue;
      }
      const hash = target.indexOf('#');
      const pathPart = hash < 0 ? target : target.slice(0, hash);
      const anchor = hash < 0 ? undefined : decodeURIComponent(target.slice(hash + 1));
      let dest;
      try {
        dest = pathPart === '' ? path : resolve(dirname(path), decodeURIComponent(pathPart.replace(/\?.*$/, '')));
      } catch {
        problems.push(`${where}: not a valid URL path`);
        continue;
      }
      if (!existsSync(dest)) {
        problems.push(`${where}: ${relative(root, dest) || '.'} does not exist`);
        continue;
      }
      if (inside(docsDir, path) && !inside(docsDir, dest)) {
        problems.push(`${where}: leaves ${DOCS_DIR}/, so the built site has nothing there (name the path as code, or link a page in ${DOCS_DIR}/)`);
        continue;
      }
      if (anchor === undefined) continue;
      if (statSync(dest).isDirectory() || !dest.endsWith('.md')) {
        problems.push(`${where}: an anchor into ${relative(root, dest)}, which is not a markdown file`);
        continue;
      }
      const { github, mkdocs } = anchors(dest);
      const onSite = inside(docsDir, dest);
      if (!github.has(anchor)) {
        problems.push(`${where}: ${relative(root, dest)} has no heading #${anchor} (its anchors: ${[...github].join(', ') || 'none'})`);
      } else if (onSite && !mkdocs.has(anchor)) {
        problems.push(`${where}: #${anchor} is GitHub's anchor, but on the site that heading's id is another (its ids: ${[...mkdocs].join(', ')})`);
      }
    }
  }
  return problems;
}

/** defaultFiles are README.md and every .md under docs/, relative to root. */
export function defaultFiles(root = ROOT) {
  const out = ['README.md'];
  const walk = (dir) => {
    for (const e of readdirSync(join(root, dir), { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      if (e.isDirectory()) walk(join(dir, e.name));
      else if (e.name.endsWith('.md')) out.push(join(dir, e.name));
    }
  };
  walk(DOCS_DIR);
  return out;
}

function main(args) {
  const files = args.length > 0 ? args : defaultFiles();
  const problems = checkFiles(files, args.length > 0 ? process.cwd() : ROOT);
  for (const p of problems) console.log(p);
  const links = files.reduce((n, f) => n + linksOf(readFileSync(resolve(args.length > 0 ? process.cwd() : ROOT, f), 'utf8')).length, 0);
  console.log(`${files.length} files, ${links} links: ${problems.length === 0 ? 'all resolve' : `${problems.length} broken`}`);
  return problems.length === 0 ? 0 : 1;
}

if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) process.exitCode = main(process.argv.slice(2));
