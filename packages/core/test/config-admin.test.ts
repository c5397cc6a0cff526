import t from 'tap';
import { resolveConfig } from '../src/index.js';

const errors = (admin: Record<string, unknown>) => resolveConfig({ admin }).problems.filter((p) => p.level === 'error');

t.test('admin.* durations: the defaults hold; 0 is refused naming the key', async (t) => {
  const { config, problems } = resolveConfig({});
  t.same(problems.filter((p) => p.level === 'error'), []);
  t.same([config.admin.link_lifetime, config.admin.session_idle_timeout, config.admin.session_max_age], [600_000, 1_800_000, 43_200_000]);
  for (const key of ['link_lifetime', 'session_idle_timeout', 'session_max_age']) {
    for (const zero of [0, '0', '0s', '0m']) {
      const found = errors({ [key]: zero }).filter((p) => p.key === `admin.${key}`);
      t.equal(found.length, 1, `admin.${key}: ${JSON.stringify(zero)} is refused`);
      t.match(found[0]?.message, /must be more than 0/, 'the message says why');
    }
  }
  t.same(errors({ link_lifetime: '5m', session_idle_timeout: '1h', session_max_age: '8h' }), [], 'positive values are taken');
});

t.test('admin.session_idle_timeout may not exceed admin.session_max_age', async (t) => {
  const [p, ...more] = errors({ session_idle_timeout: '2h', session_max_age: '1h' });
  t.same(more, []);
  t.equal(p?.key, 'admin.session_idle_timeout');
  t.match(p?.message, /2h.*longer than admin\.session_max_age \(1h\)/);
  t.same(errors({ session_idle_timeout: '1h', session_max_age: '1h' }), [], 'equal is fine');
});

t.test('other durations still take 0 as off', async (t) => {
  t.same(resolveConfig({ audit: { retention: 0 } }).problems.filter((p) => p.level === 'error'), []);
});
