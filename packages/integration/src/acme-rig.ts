import { connect, type PeerCertificate } from 'node:tls';
import { freePort } from './ports.js';
import { startChallTestSrv, startPebble, type Pebble, type PebbleChallTestSrv } from './pebble.js';

/**
 * AcmeRig is pebble (the ACME test CA) with pebble-challtestsrv as its DNS, set up for one Headway server on this
 * machine: `localhost` (a name pebble issues for and every client here resolves to 127.0.0.1) validated on
 * `tlsPort` (TLS-ALPN-01: the server's listen_addr) or `httpPort` (HTTP-01: its tls_letsencrypt_listen). The ACME
 * client trusts pebble's HTTPS directory through NODE_EXTRA_CA_CERTS, set for this process.
 */
export interface AcmeRig {
  pebble: Pebble;
  dns: PebbleChallTestSrv;
  host: string;
  tlsPort: number;
  httpPort: number;
  /** mainPort is listen_addr's port under HTTP-01 (any port: the CA does not connect to it). */
  mainPort: number;
  /** config is a server's Let's Encrypt block for `challenge`, listening where pebble validates. */
  config(challenge: 'TLS-ALPN-01' | 'HTTP-01'): Record<string, unknown>;
  stop(): Promise<void>;
}

export async function startAcmeRig(opts: { validitySeconds?: number } = {}): Promise<AcmeRig> {
  const dns = await startChallTestSrv();
  const host = 'localhost';
  try {
    await dns.setA(host);
    const tlsPort = await freePort();
    const httpPort = await freePort();
    const mainPort = await freePort();
    const pebble = await startPebble({ dnsServer: dns.dnsAddress, tlsPort, httpPort, validitySeconds: opts.validitySeconds });
    process.env['NODE_EXTRA_CA_CERTS'] = pebble.listenerCaFile;
    return {
      pebble, dns, host, tlsPort, httpPort, mainPort,
      config: (challenge) => {
        // TLS-ALPN-01 is answered on listen_addr; HTTP-01 on its own listener, listen_addr then on another port.
        const listen = challenge === 'TLS-ALPN-01' ? tlsPort : mainPort;
        return {
          tls_letsencrypt_hostname: host,
          tls_letsencrypt_challenge_type: challenge,
          acme_url: pebble.directory,
          acme_email: 'admin@example.com',
          listen_addr: `127.0.0.1:${listen}`,
          server_url: `https://${host}:${listen}`,
          ...(challenge === 'HTTP-01' ? { tls_letsencrypt_listen: `127.0.0.1:${httpPort}` } : {}),
        };
      },
      async stop() { await pebble.stop(); await dns.stop(); },
    };
  } catch (err) {
    await dns.stop();
    throw err;
  }
}

/** servedCertificate is the certificate a TLS client verifying against `ca` gets from 127.0.0.1:port for `servername` (h2 for gRPC). */
export function servedCertificate(port: number, servername: string, ca: string, alpn = 'http/1.1'): Promise<PeerCertificate> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port, servername, ca, ALPNProtocols: [alpn] }, () => {
      const cert = s.getPeerCertificate();
      s.end();
      resolve(cert);
    });
    s.once('error', reject);
  });
}
