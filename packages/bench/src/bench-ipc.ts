/**
 * Messages between the benchmark driver (bench.ts) and the forked server process (bench-server.ts).
 * The server runs in its own process so its memoryUsage() is not mixed with the virtual devices' cost.
 */

/** MemorySample is process.memoryUsage() taken right after forced garbage collection (and the resident set just before it), plus CPU time so far. */
export interface MemorySample {
  rss: number;
  /** rssLive is the resident set read just before the forced collections: what the running server holds. */
  rssLive: number;
  heapUsed: number;
  heapTotal: number;
  external: number;
  arrayBuffers: number;
  /** cpuUserMs / cpuSystemMs are process.cpuUsage() totals in milliseconds. */
  cpuUserMs: number;
  cpuSystemMs: number;
  /** loopDelay: server event-loop delay since the previous sample (ms); long stalls delay every session. */
  loopDelayP99Ms: number;
  loopDelayMaxMs: number;
}

/** ServerCommand is what the driver asks of the server process. */
export type ServerCommand =
  | { op: 'memory' }
  | { op: 'nodeId'; nodeKey: string }
  | { op: 'rename'; nodeId: number; name: string }
  | { op: 'stop' };

/** ServerRequest is a ServerCommand on the wire; `id` pairs it with its reply. */
export type ServerRequest = ServerCommand & { id: number };

/** ServerReady is sent once the server listens and the user and reusable key exist. */
export interface ServerReady {
  type: 'ready';
  url: string;
  authKey: string;
  baseDomain: string;
  dataDir: string;
}

/** ServerReply answers one ServerRequest; `result` depends on the op (MemorySample, node id, rename ms, null). */
export type ServerReply =
  | { type: 'reply'; id: number; ok: true; result: unknown }
  | { type: 'reply'; id: number; ok: false; error: string };

/** ServerMessage is anything the server process sends. */
export type ServerMessage = ServerReady | ServerReply | { type: 'fatal'; error: string };

/** isServerMessage guards IPC input, which is untyped JSON. */
export function isServerMessage(value: unknown): value is ServerMessage {
  if (typeof value !== 'object' || value === null) return false;
  const type = (value as { type?: unknown }).type;
  return type === 'ready' || type === 'reply' || type === 'fatal';
}

/** isServerRequest guards IPC input on the server side. */
export function isServerRequest(value: unknown): value is ServerRequest {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as { id?: unknown; op?: unknown };
  return typeof v.id === 'number' && (v.op === 'memory' || v.op === 'nodeId' || v.op === 'rename' || v.op === 'stop');
}
