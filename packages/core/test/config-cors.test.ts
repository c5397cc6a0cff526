import t from 'tap';
import { resolveConfig } from '../src/index.js';

const problemsFor = (origins: unknown) =>
  resolveConfig({ api: { cors: { allowed_origins: origins } } }).problems.filter((p) => p.level !== 'warn' && p.key === 'api.cors.allowed_origins');

t.test('api.cors.allowed_origins takes exact origins; none by default', async (t) => {
  t.same(resolveConfig({}).config.api.cors.allowed_origins, [], 'no CORS unless configured');
  const { config, problems } = resolveConfig({ api: { cors: { allowed_origins: ['https://ui.example.com', 'http://127.0.0.1:3000/'] } } });
  t.same(problems.filter((p) => p.level !== 'warn'), []);
  t.same(config.api.cors.allowed_origins, ['https://ui.example.com', 'http://127.0.0.1:3000'], 'a trailing slash is dropped');
});

t.test('a wildcard, a path, another scheme or a non-list is refused naming what was found', async (t) => {
  for (const bad of ['*', 'https://*.example.com', 'https://ui.example.com/admin', 'ftp://ui.example.com', 'ui.example.com', 'https://user:pw@ui.example.com']) {
    const [p] = problemsFor([bad]);
    t.match(p?.message, /expected an origin such as https:\/\/ui\.example\.com/, bad);
    t.match(p?.message, JSON.stringify(bad).slice(1, 10), `${bad}: the message quotes it`);
  }
  t.match(problemsFor('https://ui.example.com')[0]?.message, /expected a list of origins, found string/, 'a bare string in YAML is refused');
  t.match(problemsFor([42])[0]?.message, /expected a list of origins/);
});

t.test('HEADWAY_API_CORS_ALLOWED_ORIGINS reads a comma-separated list', async (t) => {
  const { loadConfig } = await import('../src/index.js');
  const { mkdtempSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const dir = mkdtempSync(join(tmpdir(), 'hw-cors-'));
  const { config } = loadConfig({ env: { HEADWAY_API_CORS_ALLOWED_ORIGINS: 'https://a.example.com, http://127.0.0.1:3000' }, home: dir, cwd: dir });
  t.same(config.api.cors.allowed_origins, ['https://a.example.com', 'http://127.0.0.1:3000']);
});
