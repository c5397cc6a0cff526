// packed-registry.mjs installs Headway from a checkout as if from the npm registry: it packs every published
// workspace (running its prepack, as `npm publish` would), serves exactly those tarballs for the @headway scope
// from a throwaway registry on 127.0.0.1, and runs the npm command it was given with
// `--@headway:registry=<that registry> @headway/cli` appended. Third-party dependencies come from the default
// registry (or npm's cache). scripts/install.sh and packed-install.test.ts use it.
//   node scripts/packed-registry.mjs npm install -g --prefix /usr/local
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** publishedWorkspaces lists the workspaces that are not private: what goes to the registry. */
export function publishedWorkspaces(root = ROOT) {
  const rootPkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  return rootPkg.workspaces
    .map((dir) => ({ dir: join(root, dir), pkg: JSON.parse(readFileSync(join(root, dir, 'package.json'), 'utf8')) }))
    .filter((w) => !w.pkg.private);
}

function run(cmd, args, opts) {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, opts);
    let out = '';
    child.stdout?.on('data', (c) => { out += c; });
    child.on('error', (err) => resolve({ code: 127, out: `${cmd}: ${err.message}` }));
    child.on('close', (code, signal) => resolve({ code: code ?? (signal ? 128 : 1), out }));
  });
}

/** packWorkspaces runs `npm pack` (with each prepack) for the workspaces into dir; it throws with npm's output when that fails. */
export async function packWorkspaces(dir, published, root = ROOT) {
  const pack = await run('npm', ['pack', '--loglevel=warn', '--pack-destination', dir, ...published.flatMap((w) => ['-w', w.dir])],
    { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] });
  const files = readdirSync(dir).filter((f) => f.endsWith('.tgz'));
  if (pack.code !== 0 || files.length !== published.length) {
    throw new Error(`npm pack exited ${pack.code} with ${files.length} of ${published.length} tarballs:\n${pack.out.slice(-4000)}`);
  }
  return files;
}

/**
 * serveRegistry answers npm's two requests for the packed workspaces: the packument
 * (GET /@headway%2fname) and the tarball. Anything else is 404, so a dependency on an
 * unpublished @headway package fails the install as it would on the real registry.
 * served collects the names and tarballs npm asked for.
 */
export async function serveRegistry(dir, published) {
  const served = new Set();
  const byName = new Map();
  for (const { pkg } of published) {
    const file = `${pkg.name.slice(1).replace('/', '-')}-${pkg.version}.tgz`;
    byName.set(pkg.name, { pkg, file, data: readFileSync(join(dir, file)) });
  }
  // Every run's registry has a path of its own: npm keys its cache by URL, and with --prefer-offline a packument
  // cached by an earlier run on the same port (another build's tarballs) would be taken without asking (a CI run
  // on a reused machine would install a build of an older commit and never fetch from this registry).
  const base = `/${randomBytes(8).toString('hex')}`;
  const server = createServer((req, res) => {
    const full = decodeURIComponent((req.url ?? '/').split('?')[0]);
    if (!full.startsWith(`${base}/`)) { res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not found"}'); return; }
    const path = full.slice(base.length);
    const tarball = /^\/-\/tarballs\/([^/]+\.tgz)$/.exec(path);
    if (tarball) {
      const hit = [...byName.values()].find((e) => e.file === tarball[1]);
      if (!hit) { res.writeHead(404).end(); return; }
      served.add(hit.file);
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': hit.data.length }).end(hit.data);
      return;
    }
    const entry = byName.get(path.slice(1));
    if (!entry) { res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not found"}'); return; }
    served.add(entry.pkg.name);
    const { pkg, file, data } = entry;
    const host = `http://${req.headers.host}`;
    const manifest = {
      ...pkg,
      _id: `${pkg.name}@${pkg.version}`,
      dist: {
        tarball: `${host}${base}/-/tarballs/${file}`,
        integrity: `sha512-${createHash('sha512').update(data).digest('base64')}`,
        shasum: createHash('sha1').update(data).digest('hex'),
      },
    };
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({
      name: pkg.name, 'dist-tags': { latest: pkg.version }, versions: { [pkg.version]: manifest },
    }));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${server.address().port}${base}/`, served };
}

async function main(command) {
  if (!command.length) {
    console.error('usage: node scripts/packed-registry.mjs <npm install command...>  (--@headway:registry=… @headway/cli is appended)');
    return 2;
  }
  const dir = mkdtempSync(join(tmpdir(), 'headway-packed-'));
  try {
    const published = publishedWorkspaces();
    const started = Date.now();
    const files = await packWorkspaces(dir, published);
    console.error(`packed ${files.length} workspaces in ${Math.round((Date.now() - started) / 1000)} s`);
    const registry = await serveRegistry(dir, published);
    const [cmd, ...args] = command;
    const install = await run(cmd, [...args, `--@headway:registry=${registry.url}`, '@headway/cli'], { stdio: 'inherit' });
    await new Promise((resolve) => registry.server.close(resolve));
    const names = [...registry.served].filter((f) => !f.endsWith('.tgz')).sort();
    console.log(`@headway packages from the packed tarballs: ${names.join(', ') || 'none'}`);
    if (install.code === 0 && !names.includes('@headway/cli')) {
      console.error('npm never asked the local registry for @headway/cli: it installed something else (a cached packument?)');
      return 1;
    }
    return install.code;
  } catch (err) {
    console.error(err instanceof Error ? err.message : err);
    return 1;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) process.exitCode = await main(process.argv.slice(2));
