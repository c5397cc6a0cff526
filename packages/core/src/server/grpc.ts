import * as grpc from '@grpc/grpc-js';
import type { HeadwayConfig } from '../config/schema.js';
import { grpcPlaintextProblem, isLoopbackHost, parseHostPort } from '../config/load.js';
import type { Logger } from '../log.js';
import { GRPC_POLICY_LIMIT, headscaleService } from '../api/grpc.js';
import type { ApiDeps } from '../api/route.js';

/** GrpcListener is the running gRPC API. */
export interface GrpcListener {
  /** url is grpcs://host:port or grpc://host:port with the bound port. */
  url: string;
  port: number;
  close(): Promise<void>;
}

/**
 * startGrpcServer serves headscale's HeadscaleService on grpc_listen_addr, with TLS
 * when `tls` is given (tls_cert_path/tls_key_path, the certificate listen_addr uses),
 * else plaintext where grpcPlaintextProblem allows it. Messages above the policy
 * limit are refused by grpc-js before any handler runs; smaller caps are per method.
 */
export async function startGrpcServer(opts: { config: HeadwayConfig; deps: ApiDeps; logger: Logger; tls?: { cert: Buffer; key: Buffer } }): Promise<GrpcListener> {
  const { config, logger, tls } = opts;
  const addr = config.grpc_listen_addr;
  const problem = tls ? undefined : grpcPlaintextProblem(config);
  if (problem) throw new Error(`grpc_listen_addr ${problem}`);
  const hp = parseHostPort(addr);
  if (!hp) throw new Error(`grpc_listen_addr ${addr}: expected host:port`);
  const server = new grpc.Server({
    'grpc.max_receive_message_length': GRPC_POLICY_LIMIT,
    // Idle admin connections are not kept forever.
    'grpc.max_connection_idle_ms': 5 * 60_000,
  });
  const { definition, implementation } = headscaleService(opts.deps, logger);
  server.addService(definition, implementation);
  const creds = tls
    ? grpc.ServerCredentials.createSsl(null, [{ cert_chain: tls.cert, private_key: tls.key }], false)
    : grpc.ServerCredentials.createInsecure();
  const host = hp.host.includes(':') ? `[${hp.host}]` : hp.host;
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(`${host}:${hp.port}`, creds, (err, bound) => (err ? reject(new Error(`grpc_listen_addr ${addr}: ${err.message}`)) : resolve(bound)));
  });
  const url = `${tls ? 'grpcs' : 'grpc'}://${host}:${port}`;
  if (!tls && !isLoopbackHost(hp.host)) logger.warn('the gRPC API runs without TLS (grpc_allow_insecure)', { grpc: url });
  return {
    url,
    port,
    close: () => new Promise<void>((resolve) => {
      // Calls in flight get a moment to finish; then the rest are cut.
      const force = setTimeout(() => { server.forceShutdown(); resolve(); }, 2000);
      force.unref();
      server.tryShutdown(() => { clearTimeout(force); resolve(); });
    }),
  };
}
