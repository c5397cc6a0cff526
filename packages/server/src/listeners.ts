import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import http from 'node:http';
import https from 'node:https';
import { isIPv6, type Server as NetServer, type Socket as NetSocket } from 'node:net';
import type { HeadwayConfig } from '@headway/core';
import { parseHostPort, parseLetsEncryptListen } from '@headway/core';
import { acmeTlsOptions, type ChallengeAnswers } from './acme/listen.js';
import { bindError, bindTcp } from '@headway/core';
import { relayNeedsOwnTls } from '@headway/control';

/**
 * BoundListeners are the server's TCP and UDP ports, bound before the data directory, the database or any key
 * is touched: a second server started on the same ports stops before it writes anything. Requests are attached
 * once the server is built.
 */
export interface BoundListeners {
  main: http.Server;
  metrics?: http.Server;
  grpc?: NetServer;
  stun?: UdpSocket;
  relayTls?: NetServer;
  /** acmeHttp is the HTTP-01 listener (tls_letsencrypt_listen) when Let's Encrypt validates over HTTP. */
  acmeHttp?: http.Server;
  /** close releases every port (a start that failed later). */
  close(): Promise<void>;
}

/** STARTING answers a request that reaches a port before the server behind it is built (a few hundred ms at start). */
function starting(_req: http.IncomingMessage, res: http.ServerResponse): void {
  res.statusCode = 503;
  res.setHeader('retry-after', '1');
  res.end('starting\n');
}

/** serveRequests replaces a bound HTTP port's placeholder (503 while starting) with the server's handler. */
export function serveRequests(server: http.Server, handler: http.RequestListener): void {
  server.removeListener('request', starting);
  server.on('request', handler);
}

/** handOver removes the placeholder that closes a bound TCP port's connections until its server takes it. */
export function handOver(port: NetServer): NetServer {
  port.removeAllListeners('connection');
  return port;
}

function listenHttp(server: http.Server, key: string, addr: string): Promise<void> {
  const hp = parseHostPort(addr);
  if (!hp) return Promise.reject(new Error(`${key} ${addr}: expected host:port`));
  return new Promise((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => reject(bindError(key, addr, err)));
    server.listen(hp.port, hp.host, () => { server.removeAllListeners('error'); resolve(); });
  });
}

function bindUdp(key: string, addr: string): Promise<UdpSocket> {
  const hp = parseHostPort(addr);
  if (!hp) return Promise.reject(new Error(`${key} ${addr}: expected host:port`));
  const socket = createSocket({ type: isIPv6(hp.host) ? 'udp6' : 'udp4', ipv6Only: isIPv6(hp.host) && hp.host !== '::' });
  return new Promise((resolve, reject) => {
    socket.once('error', (err: NodeJS.ErrnoException) => { socket.close(); reject(bindError(key, addr, err, 'udp')); });
    socket.bind(hp.port, hp.host, () => { socket.removeAllListeners('error'); resolve(socket); });
  });
}

/**
 * bindListeners binds every configured port, in the order a start reports them; on a failure it releases the ones bound.
 * With tls_letsencrypt_hostname, `acme` answers the CA's validations: on listen_addr (TLS-ALPN-01, which serves no
 * certificate until the manager sets one) or on tls_letsencrypt_listen (HTTP-01).
 */
export async function bindListeners(config: HeadwayConfig, tls?: { cert: Buffer; key: Buffer }, acme?: ChallengeAnswers): Promise<BoundListeners> {
  const opened: Array<() => Promise<void>> = [];
  const closeAll = async () => { for (const c of opened.reverse()) await c().catch(() => undefined); };
  const closing = (s: { close(cb: () => void): unknown }) => () => new Promise<void>((r) => { s.close(() => r()); });
  try {
    const main = tls ? https.createServer(tls, starting)
      : acme ? https.createServer(acmeTlsOptions(acme), starting)
        : http.createServer(starting);
    await listenHttp(main, 'listen_addr', config.listen_addr);
    opened.push(closing(main));
    const out: BoundListeners = { main, close: closeAll };
    if (acme && config.tls_letsencrypt_challenge_type === 'HTTP-01') {
      const hp = parseLetsEncryptListen(config.tls_letsencrypt_listen)!;
      out.acmeHttp = http.createServer(starting);
      await listenHttp(out.acmeHttp, 'tls_letsencrypt_listen', `${hp.host.includes(':') ? `[${hp.host}]` : hp.host}:${hp.port}`);
      opened.push(closing(out.acmeHttp));
    }
    if (config.metrics_listen_addr) {
      out.metrics = http.createServer(starting);
      await listenHttp(out.metrics, 'metrics_listen_addr', config.metrics_listen_addr);
      opened.push(closing(out.metrics));
    }
    if (config.grpc_listen_addr) {
      // The listener module is light: grpc-js and the service load when a first gRPC client connects (grpc-listener.ts).
      const { bindGrpcPort } = await import('@headway/api/grpc-listener');
      out.grpc = await bindGrpcPort(config, tls);
      out.grpc.on('connection', (s: NetSocket) => s.destroy());
      opened.push(closing(out.grpc));
    }
    const derp = config.derp.server;
    if (derp.enabled && derp.stun_listen_addr) {
      out.stun = await bindUdp('derp.server.stun_listen_addr', derp.stun_listen_addr);
      opened.push(closing(out.stun));
    }
    if (derp.enabled && relayNeedsOwnTls(config)) {
      // Empty: listen_addr's host, a port picked now (the DERP map carries whichever it is).
      const host = parseHostPort(config.listen_addr)!.host;
      const addr = derp.tls_listen_addr || `${host.includes(':') ? `[${host}]` : host}:0`;
      out.relayTls = await bindTcp('derp.server.tls_listen_addr', addr);
      out.relayTls.on('connection', (s: NetSocket) => s.destroy());
      opened.push(closing(out.relayTls));
    }
    return out;
  } catch (err) {
    await closeAll();
    throw err;
  }
}
