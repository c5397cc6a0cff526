import { createServer, request } from 'node:https';
import type { AddressInfo } from 'node:net';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pebbleDir, type Pebble } from './pebble.js';

/**
 * FinalizeLocationProxy sits between an ACME client and pebble and adds the order's
 * URL as the Location header of a finalize answer. Go's ACME client (x/crypto/acme,
 * which tailscaled uses) polls that header's URL while the CA is still issuing;
 * pebble answers `processing` without it, and the client
 * then fails with `Post "": unsupported protocol scheme ""`. Everything else passes
 * through unchanged, Host header included, so the URLs pebble writes (built from the
 * Host it was asked on) and the URLs the client signs all name the proxy.
 */
export interface FinalizeLocationProxy {
  /** directory is the ACME directory URL through the proxy. */
  directory: string;
  stop(): Promise<void>;
}

/** startFinalizeLocationProxy serves HTTPS on 127.0.0.1 with pebble's own listener certificate. */
export async function startFinalizeLocationProxy(pebble: Pebble): Promise<FinalizeLocationProxy> {
  const dir = pebbleDir();
  if (!dir) throw new Error('pebble is not built (bash .ci/install-pebble.sh)');
  const upstream = new URL(pebble.directory);
  const server = createServer({
    cert: readFileSync(join(dir, 'certs', 'localhost', 'cert.pem')),
    key: readFileSync(join(dir, 'certs', 'localhost', 'key.pem')),
  }, (req, res) => {
    const out = request({
      host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers, ca: pebble.listenerCaPem,
    }, (answer) => {
      const headers = { ...answer.headers };
      const finalize = /^\/finalize-order\/([^/?]+)/.exec(req.url ?? '');
      if (finalize && !headers.location) headers.location = `https://${req.headers.host}/my-order/${finalize[1]}`;
      res.writeHead(answer.statusCode ?? 502, headers);
      answer.pipe(res);
    });
    out.on('error', (err) => { res.writeHead(502); res.end(err.message); });
    req.pipe(out);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    directory: `https://127.0.0.1:${port}${upstream.pathname}`,
    stop: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}
