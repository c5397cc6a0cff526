import t from 'tap';
import { resolveConfig } from '../src/config/load.js';

// A compose file carried over from headscale sets HEADSCALE_<KEY>; Headway reads HEADWAY_<KEY>.

t.test('a HEADSCALE_ variable for a known key is a warning naming the HEADWAY_ one, and changes nothing', async (t) => {
  const { config, problems } = resolveConfig({}, { env: { HEADSCALE_SERVER_URL: 'https://hs.example.com', HEADSCALE_LOG_FORMAT: 'json' } });
  t.equal(config.server_url, 'http://127.0.0.1:8080', 'the variable is not applied');
  t.equal(config.log.format, 'text');
  t.same(problems.map((p) => [p.level, p.key, p.message]), [
    ['warn', 'HEADSCALE_SERVER_URL', 'ignored: Headway reads HEADWAY_SERVER_URL (the `server_url` key); rename the variable'],
    ['warn', 'HEADSCALE_LOG_FORMAT', 'ignored: Headway reads HEADWAY_LOG_FORMAT (the `log.format` key); rename the variable'],
  ]);
});

t.test('with the HEADWAY_ variable set too, the warning only says the other one is ignored', async (t) => {
  const { config, problems } = resolveConfig({}, { env: { HEADSCALE_LISTEN_ADDR: '0.0.0.0:1', HEADWAY_LISTEN_ADDR: '0.0.0.0:8080' } });
  t.equal(config.listen_addr, '0.0.0.0:8080');
  t.same(problems.map((p) => p.message), ['ignored: Headway reads HEADWAY_LISTEN_ADDR (the `listen_addr` key)']);
});

t.test('HEADSCALE_ variables that name no key (HEADSCALE_CONFIG, anything else) are not reported', async (t) => {
  const { problems } = resolveConfig({}, { env: { HEADSCALE_CONFIG: '/etc/headscale/config.yaml', HEADSCALE_SOMETHING: 'x' } });
  t.same(problems, []);
});
