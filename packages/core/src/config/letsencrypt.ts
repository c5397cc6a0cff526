import type { ConfigValues } from './keys.js';
import type { ConfigProblem } from './problems.js';
import { isDomainName, parseHostPort } from './syntax.js';

/*
 * The Let's Encrypt (ACME) keys, headscale's names: checked together once every key holds a value of its own kind.
 */

/** SERVICE_PORTS are the service names tls_letsencrypt_listen may use for its port, as headscale's default `:http` does. */
const SERVICE_PORTS: Record<string, number> = { http: 80, https: 443 };

/** parseLetsEncryptListen reads tls_letsencrypt_listen: host:port, the port a number or a service name (`:http`). */
export function parseLetsEncryptListen(v: string): { host: string; port: number } | undefined {
  const m = /^(.*):([a-z]+)$/i.exec(v);
  const port = m ? SERVICE_PORTS[m[2]!.toLowerCase()] : undefined;
  return parseHostPort(port === undefined ? v : `${m![1]}:${port}`);
}

/** EMAIL is the shape of a contact address the CA accepts (a mailto: URI's address part). */
const EMAIL = /^[^\s@:,<>]+@[^\s@:,<>]+\.[^\s@:,<>]+$/;

/** checkLetsEncrypt validates the ACME keys when tls_letsencrypt_hostname turns them on, naming the key at fault. */
export function checkLetsEncrypt(values: Readonly<ConfigValues>, problems: ConfigProblem[]): void {
  const err = (key: string, message: string) => problems.push({ level: 'error', key, message });
  const listen = values.tls_letsencrypt_listen;
  if (!parseLetsEncryptListen(listen)) err('tls_letsencrypt_listen', `expected host:port (:http, :80, 0.0.0.0:80), found ${JSON.stringify(listen)}`);
  const host = values.tls_letsencrypt_hostname;
  if (!host) return;
  if (!isDomainName(host) || host.endsWith('.') || host.includes('_') || host.includes('*')) {
    err('tls_letsencrypt_hostname', `expected the server's DNS name such as headway.example.com (no wildcard, no IP address), found ${JSON.stringify(host)}`);
  }
  if (values.tls_cert_path || values.tls_key_path) {
    err('tls_letsencrypt_hostname', `set either tls_letsencrypt_hostname or tls_cert_path/tls_key_path, not both`);
  }
  try {
    const url = new URL(values.server_url);
    if (url.protocol !== 'https:' || url.hostname.toLowerCase() !== host.toLowerCase()) {
      err('server_url', `must be https://${host.toLowerCase()} (with a port if not 443) when tls_letsencrypt_hostname is ${host}: devices check the certificate against server_url's host; found ${values.server_url}`);
    }
  } catch { /* server_url already reported */ }
  const acme = values.acme_url;
  if (acme && !acme.startsWith('https://')) err('acme_url', `expected the CA's https:// directory URL, found ${JSON.stringify(acme)}`);
  const email = values.acme_email;
  if (email && !EMAIL.test(email.replace(/^mailto:/i, ''))) err('acme_email', `expected an e-mail address such as admin@example.com, found ${JSON.stringify(email)}`);
  const main = parseHostPort(values.listen_addr);
  if (values.tls_letsencrypt_challenge_type === 'TLS-ALPN-01' && main && main.port !== 443) {
    // Not an error: a port forward or a proxy passing TLS through may bring port 443 here.
    problems.push({ level: 'warn', key: 'listen_addr', message: `TLS-ALPN-01 is answered on listen_addr, which the CA reaches on port 443; ${values.listen_addr} needs a port forward from 443 (or listen on :443)` });
  }
  const http01 = parseLetsEncryptListen(listen);
  if (values.tls_letsencrypt_challenge_type === 'HTTP-01' && http01 && main && http01.port === main.port && http01.port !== 0) {
    err('tls_letsencrypt_listen', `${listen} is listen_addr's port; the HTTP-01 listener needs a port of its own (the CA connects to port 80)`);
  }
}
