import type http from 'node:http';
import type { SecureContext, TLSSocket } from 'node:tls';

/*
 * The listeners' part in ACME validation: TLS-ALPN-01 on the main TLS listener (RFC 8737) and HTTP-01 on a plain
 * listener (tls_letsencrypt_listen), which sends every other request to server_url.
 */

/** ACME_TLS_ALPN is the ALPN protocol a CA validating TLS-ALPN-01 offers (alone). */
export const ACME_TLS_ALPN = 'acme-tls/1';
/** HTTP_CHALLENGE_PATH is where a CA fetches an HTTP-01 answer. */
const HTTP_CHALLENGE = /^\/\.well-known\/acme-challenge\/([A-Za-z0-9_-]+)$/;

export interface ChallengeAnswers {
  httpAnswer(token: string): Promise<string | undefined>;
  /** alpnOffered decides at once (inside the TLS handshake) whether an acme-tls/1 connection for `host` is taken. */
  alpnOffered(host: string): boolean;
  alpnContext(host: string): Promise<SecureContext | undefined>;
}

/** A late-bound ChallengeAnswers: the listeners are bound before the certificate manager exists. */
export class AnswerSlot implements ChallengeAnswers {
  target?: ChallengeAnswers;
  async httpAnswer(token: string): Promise<string | undefined> { return this.target?.httpAnswer(token); }
  alpnOffered(host: string): boolean { return this.target?.alpnOffered(host) ?? false; }
  async alpnContext(host: string): Promise<SecureContext | undefined> { return this.target?.alpnContext(host); }
}

const VALIDATING = Symbol('acme-tls/1 validation');
type Marked = TLSSocket & { [VALIDATING]?: boolean };

/**
 * acmeTlsOptions are the main HTTPS listener's options under ACME: no certificate of their own (the manager's is set
 * with setSecureContext once there is one), and a CA's acme-tls/1 connection answered with the challenge certificate.
 * Node calls both callbacks with the connection's TLSSocket as `this`. The ALPN choice comes first when the CA
 * speaks TLS 1.3 (as Let's Encrypt's and pebble's validators do), so the connection is marked there and its
 * certificate picked when the SNI callback runs (read from the cluster's store when another instance ordered);
 * everything else gets the served certificate. Under TLS 1.2 OpenSSL picks the certificate before the protocol, so
 * a validator limited to TLS 1.2 would get the served certificate and fail.
 */
export function acmeTlsOptions(answers: ChallengeAnswers): { ALPNCallback: (this: TLSSocket, a: { servername: string; protocols: string[] }) => string | undefined; SNICallback: (this: TLSSocket, name: string, cb: (err: Error | null, ctx?: SecureContext) => void) => void } {
  return {
    ALPNCallback(this: Marked, { servername, protocols }) {
      if (protocols.includes(ACME_TLS_ALPN)) {
        if (!servername || !answers.alpnOffered(servername)) return undefined;
        this[VALIDATING] = true;
        return ACME_TLS_ALPN;
      }
      // What https.createServer offers by default; a client offering only other protocols is refused, as it would be there.
      return protocols.includes('http/1.1') ? 'http/1.1' : undefined;
    },
    SNICallback(this: Marked, name, cb) {
      if (!this[VALIDATING]) { cb(null); return; }
      answers.alpnContext(name).then(
        (ctx) => cb(ctx ? null : new Error(`no TLS-ALPN-01 validation of ${name} is running`), ctx),
        (err: Error) => cb(err),
      );
    },
  };
}

/**
 * http01Handler answers HTTP-01 validations and redirects every other request to the same path on server_url, as
 * headscale does (the plain port is then also the http:// to https:// redirect).
 */
export function http01Handler(answers: ChallengeAnswers, serverUrl: string): http.RequestListener {
  return (req, res) => {
    const path = req.url ?? '/';
    const m = HTTP_CHALLENGE.exec(path.split('?')[0]!);
    if (m) {
      const reply = (status: number, text: string) => { res.statusCode = status; res.setHeader('content-type', 'text/plain'); res.end(text); };
      answers.httpAnswer(m[1]!).then(
        (answer) => (answer ? reply(200, answer) : reply(404, 'no such challenge\n')),
        () => reply(503, 'the challenge store cannot be read\n'),
      );
      return;
    }
    res.statusCode = 308;
    res.setHeader('location', serverUrl + (path.startsWith('/') ? path : '/'));
    res.end();
  };
}
