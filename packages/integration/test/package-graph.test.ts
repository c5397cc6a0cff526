// The workspace's packages depend downward only, and every dependency is declared where the
// tools read it: each `@headway/*` a package imports is in its package.json (npm links and packs
// it) and in the tsconfig project that compiles the importing file (`tsc -b` builds it first; a
// missing reference compiles only when another project happened to build the target earlier).
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import t from 'tap';
import ts from 'typescript';
import { repoRoot } from '../src/tailscale.js';

const root = repoRoot();

interface Workspace { dir: string; name: string; pkg: Record<string, Record<string, string> | undefined> }

const workspaces: Workspace[] = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { workspaces: string[] }).workspaces
  .map((dir) => ({ dir, pkg: JSON.parse(readFileSync(join(root, dir, 'package.json'), 'utf8')) }))
  .map(({ dir, pkg }) => ({ dir, name: pkg.name as unknown as string, pkg }));
const byName = new Map(workspaces.map((w) => [w.name, w]));

/** LAYER ranks the server's packages: a package may import only packages of a lower layer. */
const LAYER: Record<string, number> = {
  '@headway/core': 0,
  '@headway/control': 1,
  '@headway/api': 1,
  '@headway/server': 2,
  '@headway/cli': 3,
};

function tsFiles(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).flatMap((e) => {
    const p = join(dir, e);
    if (e === 'node_modules' || e === 'dist' || e === 'fixtures') return [];
    return statSync(p).isDirectory() ? tsFiles(p) : /\.m?ts$/.test(e) && !e.endsWith('.d.ts') ? [p] : [];
  });
}

/** imported lists the workspace packages a file names in an import, export-from or dynamic import. */
function imported(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const out = new Set<string>();
  for (const m of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)['"](@headway\/[a-z0-9-]+)(?:\/[^'"]*)?['"]/g)) out.add(m[1]!);
  return [...out].filter((n) => byName.has(n));
}

/** readConfig reads a tsconfig.json, which may hold comments (TypeScript's own reader takes them). */
function readConfig(path: string): { files?: string[]; references?: Array<{ path: string }> } {
  const parsed = ts.parseConfigFileTextToJson(path, readFileSync(path, 'utf8'));
  if (parsed.error) throw new Error(`${path}: ${ts.flattenDiagnosticMessageText(parsed.error.messageText, '\n')}`);
  return parsed.config as { files?: string[]; references?: Array<{ path: string }> };
}

/** projectOf finds the tsconfig.json that compiles a file: the nearest one above it inside its package. */
function projectOf(w: Workspace, file: string): string {
  let dir = join(file, '..');
  const top = join(root, w.dir);
  while (dir.startsWith(top)) {
    const config = join(dir, 'tsconfig.json');
    // A project that lists its files compiles only those; any other file here belongs to a project further up.
    if (existsSync(config) && (readConfig(config).files?.some((f) => join(dir, f) === file) ?? true)) return config;
    dir = join(dir, '..');
  }
  return join(top, 'tsconfig.json');
}

/** referenced lists the package names a tsconfig's references point at (directly). */
function referenced(tsconfig: string): Set<string> {
  const refs = readConfig(tsconfig).references ?? [];
  const names = new Set<string>();
  for (const r of refs) {
    let dir = join(tsconfig, '..', r.path);
    while (!existsSync(join(dir, 'package.json'))) dir = join(dir, '..');
    names.add((JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name: string }).name);
  }
  return names;
}

t.test('every imported workspace package is declared in package.json and referenced by the compiling project', async (t) => {
  const problems: string[] = [];
  let checked = 0;
  for (const w of workspaces) {
    const runtime = { ...w.pkg.dependencies, ...w.pkg.optionalDependencies, ...w.pkg.peerDependencies };
    const any = { ...runtime, ...w.pkg.devDependencies };
    for (const file of [...tsFiles(join(root, w.dir, 'src')), ...tsFiles(join(root, w.dir, 'test'))]) {
      const rel = relative(root, file);
      const inSrc = rel.startsWith(join(w.dir, 'src'));
      const refs = referenced(projectOf(w, file));
      for (const dep of imported(file)) {
        if (dep === w.name) continue;
        checked++;
        if (!(dep in (inSrc ? runtime : any))) problems.push(`${rel}: imports ${dep}, missing from ${w.dir}/package.json ${inSrc ? 'dependencies' : 'dependencies or devDependencies'}`);
        if (!refs.has(dep)) problems.push(`${rel}: imports ${dep}, missing from the references of ${relative(root, projectOf(w, file))}`);
      }
    }
  }
  t.ok(checked > 100, `${checked} imports of workspace packages checked`);
  t.same(problems, [], 'declared and referenced');
});

t.test('the server packages depend downward only: core on none of them, control and api on core, server on those', async (t) => {
  const problems: string[] = [];
  for (const [name, layer] of Object.entries(LAYER)) {
    const w = byName.get(name);
    t.ok(w, `${name} is a workspace`);
    if (!w) continue;
    for (const file of tsFiles(join(root, w.dir, 'src'))) {
      for (const dep of imported(file)) {
        if (dep !== name && dep in LAYER && LAYER[dep]! >= layer) problems.push(`${relative(root, file)} (${name}) imports ${dep}`);
      }
    }
  }
  t.same(problems, [], 'no import sideways or up');
});

t.test('runtime dependencies between workspace packages have no cycle', async (t) => {
  const edges = new Map(workspaces.map((w) => [w.name, Object.keys({ ...w.pkg.dependencies, ...w.pkg.optionalDependencies }).filter((d) => byName.has(d))]));
  const state = new Map<string, 'open' | 'done'>();
  const cycles: string[] = [];
  const visit = (n: string, path: string[]): void => {
    if (state.get(n) === 'done') return;
    if (state.get(n) === 'open') { cycles.push([...path.slice(path.indexOf(n)), n].join(' -> ')); return; }
    state.set(n, 'open');
    for (const d of edges.get(n) ?? []) visit(d, [...path, n]);
    state.set(n, 'done');
  };
  for (const n of edges.keys()) visit(n, []);
  t.ok(edges.get('@headway/server')?.includes('@headway/control'), 'the graph is read (server depends on control)');
  t.same(cycles, [], 'acyclic');
});
