// The composition root is the only place production code builds kernel services:
// a scan of the sources of core, control, api and server for `new <Service>(` outside server's compose.ts.
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';

const PACKAGES = fileURLToPath(new URL('../../../', import.meta.url));
const SCANNED = ['core', 'control', 'api', 'server'];
const COMPOSE = join('server', 'src', 'compose.ts');
const SERVICES = [
  'State', 'PolicyService', 'Metrics', 'NetworkView', 'DnsConfigSource', 'DerpMapSource', 'Mapper', 'SessionHub',
  'Registrar', 'RouteService', 'HostinfoService', 'NodeGc', 'Relay', 'ControlServer',
];

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []);
}

t.test('a second assembly of the server (new of a kernel service outside the composition root) is refused', async (t) => {
  const files = SCANNED.flatMap((p) => sources(join(PACKAGES, p, 'src')));
  t.ok(files.length > 60, `scanned ${files.length} source files`);
  const pattern = new RegExp(`\\bnew (${SERVICES.join('|')})\\(`, 'g');
  const found: string[] = [];
  const inCompose = new Set<string>();
  for (const f of files) {
    const rel = relative(PACKAGES, f);
    for (const m of readFileSync(f, 'utf8').matchAll(pattern)) {
      if (rel === COMPOSE) inCompose.add(m[1]!);
      else found.push(`${rel}: new ${m[1]}(`);
    }
  }
  t.same(found, [], 'no kernel service is constructed outside the composition root');
  t.same([...inCompose].sort(), [...SERVICES].sort(), 'the composition root builds every one of them');
});
