import type * as Grpc from '@grpc/grpc-js';
import type { Server, Socket } from 'node:net';
import { HandshakeFailureLog } from '@headway/derp';
import { bindTcp } from '@headway/core';
import type { HeadwayConfig } from '@headway/core';
import { grpcPlaintextProblem, isLoopbackHost, parseHostPort } from '@headway/core';
import type { Logger } from '@headway/core';
import type { ApiDeps } from './route.js';

/** GrpcListener is the running gRPC API. */
export interface GrpcListener {
  /** url is grpcs://host:port or grpc://host:port with the bound port. */
  url: string;
  port: number;
  /**
   * setTls serves a new certificate (a renewed ACME one) to connections accepted from now on; open ones keep theirs.
   * Only for a listener started with TLS.
   */
  setTls(tls: { cert: Buffer; key: Buffer }): void;
  close(): Promise<void>;
}

/** GRPC_OFF is what a bind error suggests: the gRPC API is only for headscale's CLI and gRPC clients. */
const GRPC_OFF = 'set grpc_listen_addr: "" to turn the gRPC API off';
/** TLS_HANDSHAKE is the first byte of every TLS connection (a handshake record, RFC 8446 §5.1). */
const TLS_HANDSHAKE = 0x16;

/** bindGrpcPort opens grpc_listen_addr before anything else is done at start; its error names the key and the way to turn it off. */
export function bindGrpcPort(config: HeadwayConfig, tls?: { cert: Buffer; key: Buffer }): Promise<Server> {
  const problem = tls ? undefined : grpcPlaintextProblem(config);
  if (problem) return Promise.reject(new Error(`grpc_listen_addr ${problem}`));
  return bindTcp('grpc_listen_addr', config.grpc_listen_addr, GRPC_OFF);
}

/**
 * startGrpcServer serves headscale's HeadscaleService on grpc_listen_addr, with TLS
 * when `tls` is given (tls_cert_path/tls_key_path, the certificate listen_addr uses),
 * else plaintext where grpcPlaintextProblem allows it. Messages above the policy
 * limit are refused by grpc-js before any handler runs; smaller caps are per method.
 *
 * grpc-js, the proto loader and the service are loaded when the first connection arrives (they are several MiB of
 * a server's memory, and most servers never see a gRPC client); connections wait in the meantime.
 * The port is Headway's own listener (bindGrpcPort), whose connections are handed to grpc-js: grpc-js's own
 * bind prints a raw `E No address added` line on a clash, and its server cannot say that a client spoke TLS
 * to a plaintext port (the headscale CLI without `insecure` does, and sees only "context deadline exceeded").
 * The first byte of each connection tells; the mismatch is logged as the main port logs one (HandshakeFailureLog:
 * once a minute per client address, repeats counted).
 */
export async function startGrpcServer(opts: { config: HeadwayConfig; deps: ApiDeps; logger: Logger; tls?: { cert: Buffer; key: Buffer }; listener?: Server }): Promise<GrpcListener> {
  const { config, logger, tls } = opts;
  const addr = config.grpc_listen_addr;
  const hp = parseHostPort(addr);
  if (!hp) throw new Error(`grpc_listen_addr ${addr}: expected host:port`);
  const listener = opts.listener ?? await bindGrpcPort(config, tls);
  let grpc: GrpcService | undefined;
  let loading: Promise<GrpcService> | undefined;
  let currentTls = tls;
  const load = (): Promise<GrpcService> => (loading ??= loadGrpcService({ ...opts, tls: currentTls }).then((g) => (grpc = g)));
  const host = hp.host.includes(':') ? `[${hp.host}]` : hp.host;
  const port = (listener.address() as { port: number }).port;
  const url = `${tls ? 'grpcs' : 'grpc'}://${host}:${port}`;
  if (!tls && !isLoopbackHost(hp.host)) logger.warn('the gRPC API runs without TLS (grpc_allow_insecure)', { grpc: url });
  const mismatches = new HandshakeFailureLog(logger, { message: 'grpc: connection refused' });
  const mismatch = tls
    ? 'a client spoke plaintext to the gRPC port, which uses TLS (a headscale CLI with cli.insecure: true?); connect with TLS'
    : 'a client spoke TLS to the gRPC port, which is plaintext; the headscale CLI needs cli.insecure: true (HEADSCALE_CLI_INSECURE=1) for it, or give Headway tls_cert_path and tls_key_path';
  const sockets = new Set<Socket>();
  listener.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    // A connection that says nothing is not kept: the main port's deadline.
    const silent = config.noise.handshake_timeout > 0 ? setTimeout(() => socket.destroy(), config.noise.handshake_timeout) : undefined;
    silent?.unref();
    socket.once('data', (chunk: Buffer) => {
      clearTimeout(silent);
      socket.pause();
      if ((chunk[0] === TLS_HANDSHAKE) !== Boolean(tls)) {
        mismatches.report({ remote: socket.remoteAddress, reason: mismatch, level: 'warn', fields: { grpc: url } });
        socket.destroy();
        return;
      }
      socket.unshift(chunk);
      load().then(
        (g) => { if (!socket.destroyed) g.injectors.at(-1)!.injectConnection(socket); },
        (err: unknown) => { logger.error('grpc: the gRPC service failed to load', { err: (err as Error).message }); socket.destroy(); },
      );
    });
    socket.resume();
  });
  return {
    url,
    port,
    setTls(next) {
      if (!tls) throw new Error('the gRPC listener runs without TLS');
      currentTls = next;
      void loading?.then((g) => g.add(next), () => undefined);
    },
    close: async () => {
      listener.close();
      await loading?.catch(() => undefined);
      const g = grpc;
      if (!g) { for (const s of sockets) s.destroy(); return; }
      await new Promise<void>((resolve) => {
        for (const i of g.injectors) i.drain(2000);
        // Calls in flight get a moment to finish; then the rest are cut.
        const done = () => { for (const i of g.injectors) i.destroy(); for (const s of sockets) s.destroy(); resolve(); };
        const force = setTimeout(() => { g.server.forceShutdown(); done(); }, 2000);
        force.unref();
        g.server.tryShutdown(() => { clearTimeout(force); done(); });
      });
    },
  };
}

/**
 * GrpcService is grpc-js's server with headscale's service and the injectors connections are handed to: one per
 * certificate, the last for new connections (add: a renewed certificate), the earlier ones keeping theirs.
 */
interface GrpcService {
  server: Grpc.Server;
  injectors: Array<ReturnType<Grpc.Server['createConnectionInjector']>>;
  add(tls: { cert: Buffer; key: Buffer }): void;
}

async function loadGrpcService(opts: { deps: ApiDeps; logger: Logger; tls?: { cert: Buffer; key: Buffer } }): Promise<GrpcService> {
  const grpc = await import('@grpc/grpc-js');
  const { GRPC_POLICY_LIMIT, headscaleService } = await import('./grpc.js');
  const server = new grpc.Server({
    'grpc.max_receive_message_length': GRPC_POLICY_LIMIT,
    // Idle admin connections are not kept forever.
    'grpc.max_connection_idle_ms': 5 * 60_000,
  });
  const { definition, implementation } = headscaleService(opts.deps, opts.logger);
  server.addService(definition, implementation);
  const credentials = (t?: { cert: Buffer; key: Buffer }) => (t
    ? grpc.ServerCredentials.createSsl(null, [{ cert_chain: t.cert, private_key: t.key }], false)
    : grpc.ServerCredentials.createInsecure());
  const injectors = [server.createConnectionInjector(credentials(opts.tls))];
  return { server, injectors, add: (t) => { injectors.push(server.createConnectionInjector(credentials(t))); } };
}
