import t from 'tap';
import { parseLetsEncryptListen, resolveConfig } from '../src/index.js';

const base = { server_url: 'https://hw.example.com', listen_addr: '0.0.0.0:443', tls_letsencrypt_hostname: 'hw.example.com' };
const errorsOf = (raw: Record<string, unknown>) => resolveConfig(raw, { env: {} }).problems.filter((p) => p.level === 'error').map((p) => [p.key, p.message]);

t.test('headscale\'s Let\'s Encrypt keys and defaults; a valid block has no problem', async (t) => {
  const { config, problems } = resolveConfig({ ...base, data_dir: '/srv/hw', acme_email: 'admin@example.com' }, { env: {} });
  t.same(problems, []);
  t.equal(config.tls_letsencrypt_hostname, 'hw.example.com');
  t.equal(config.tls_letsencrypt_challenge_type, 'HTTP-01');
  t.equal(config.tls_letsencrypt_listen, ':http');
  t.equal(config.tls_letsencrypt_cache_dir, '/srv/hw/cache', 'relative to data_dir');
  t.equal(config.acme_url, 'https://acme-v02.api.letsencrypt.org/directory');
  t.same(resolveConfig({ tls_letsencrypt_challenge_type: 'TLS-ALPN-01', ...base }, { env: {} }).problems, []);
  t.same(resolveConfig({}, { env: {} }).problems, [], 'unset, nothing is checked');
});

t.test('tls_letsencrypt_listen takes host:port or a service name', async (t) => {
  t.same(parseLetsEncryptListen(':http'), { host: '0.0.0.0', port: 80 });
  t.same(parseLetsEncryptListen('127.0.0.1:https'), { host: '127.0.0.1', port: 443 });
  t.same(parseLetsEncryptListen('[::1]:8080'), { host: '::1', port: 8080 });
  t.equal(parseLetsEncryptListen(':gopher'), undefined);
  t.match(errorsOf({ ...base, tls_letsencrypt_listen: 'port eighty' }), [['tls_letsencrypt_listen', /expected host:port.*"port eighty"/]]);
});

t.test('bad keys are errors naming the key', async (t) => {
  t.match(errorsOf({ ...base, tls_cert_path: '/etc/cert.pem', tls_key_path: '/etc/key.pem' }), [['tls_letsencrypt_hostname', /either tls_letsencrypt_hostname or tls_cert_path\/tls_key_path, not both/]]);
  t.match(errorsOf({ ...base, tls_letsencrypt_challenge_type: 'DNS-01' }), [['tls_letsencrypt_challenge_type', /DNS-01/]]);
  t.match(errorsOf({ ...base, server_url: 'http://hw.example.com' }), [['server_url', /must be https:\/\/hw\.example\.com .*found http:\/\/hw\.example\.com/]]);
  t.match(errorsOf({ ...base, server_url: 'https://other.example.com' }), [['server_url', /must be https:\/\/hw\.example\.com/]]);
  t.same(errorsOf({ ...base, server_url: 'https://HW.example.com:8443' }), [], 'any port, any case');
  t.match(errorsOf({ ...base, tls_letsencrypt_hostname: '192.0.2.1', server_url: 'https://192.0.2.1' }), [['tls_letsencrypt_hostname', /DNS name/]]);
  t.match(errorsOf({ ...base, tls_letsencrypt_hostname: '*.example.com', server_url: 'https://x.example.com' }), [['tls_letsencrypt_hostname', /no wildcard/], ['server_url', /.*/]]);
  t.match(errorsOf({ ...base, acme_url: 'http://ca.example.com/dir' }), [['acme_url', /https:\/\/ directory URL/]]);
  t.match(errorsOf({ ...base, acme_url: 'not a url' }), [['acme_url', /expected an http:\/\/ or https:\/\/ URL/]]);
  t.match(errorsOf({ ...base, acme_email: 'admin' }), [['acme_email', /e-mail address.*"admin"/]]);
  t.match(errorsOf({ ...base, listen_addr: '0.0.0.0:80', server_url: 'https://hw.example.com:80', tls_letsencrypt_listen: ':http' }), [['tls_letsencrypt_listen', /listen_addr's port/]]);
});

t.test('TLS-ALPN-01 away from port 443 is a warning; the gRPC API takes the certificate, so it is not plaintext', async (t) => {
  const { problems } = resolveConfig({ ...base, listen_addr: '0.0.0.0:8443', server_url: 'https://hw.example.com:8443', tls_letsencrypt_challenge_type: 'TLS-ALPN-01' }, { env: {} });
  t.match(problems, [{ level: 'warn', key: 'listen_addr', message: /port 443/ }]);
  t.same(errorsOf({ ...base, grpc_listen_addr: '0.0.0.0:50443' }), [], 'gRPC on every interface with the ACME certificate');
});

t.test('a headscale config with a Let\'s Encrypt host name and no cache directory is told headscale\'s default differed', async (t) => {
  const headscale = { ...base, database: { gorm: { prepare_stmt: true } }, derp: { server: { enabled: true } }, node: { ephemeral: { inactivity_timeout: '30m' } } };
  const warned = (raw: Record<string, unknown>) => resolveConfig(raw, { env: {} }).problems.filter((p) => p.code === 'headscale_default').map((p) => [p.key, p.message]);
  t.match(warned(headscale), [['tls_letsencrypt_cache_dir', /headscale used \/var\/www\/\.cache/]]);
  t.same(warned({ ...headscale, tls_letsencrypt_cache_dir: '/var/lib/headscale/cache' }), []);
  t.same(warned({ ...headscale, tls_letsencrypt_hostname: '', server_url: 'https://hw.example.com' }), [], 'no host name: the directory was never used');
});
