import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DerpClient, type DerpMessage } from './client.js';
import { generateDerpKeyPair } from './keys.js';
import { DerpServer } from './server.js';

export interface RelayBenchmarkOptions {
  /** packets is how many packets the throughput phase relays (each is echoed back). */
  packets: number;
  /** size is the packet size in bytes (1..65536). */
  size: number;
  /** window is how many packets may be in flight during the throughput phase (default 64). */
  window?: number;
  /** latencySamples is how many sequential round trips the latency phase times (default min(packets, 2000)). */
  latencySamples?: number;
}

export interface RelayBenchmarkResult {
  packets: number;
  size: number;
  /** packetsPerSecond counts relayed packets (both directions) per second in the pipelined phase. */
  packetsPerSecond: number;
  /** megabitsPerSecond is the payload throughput of the same phase. */
  megabitsPerSecond: number;
  /** roundTripP50Ms / P99 time one packet out and its echo back: two passes through the relay. */
  roundTripP50Ms: number;
  roundTripP99Ms: number;
  /** addedLatencyP50Ms / P99 estimate one relay pass: half the round trip. */
  addedLatencyP50Ms: number;
  addedLatencyP99Ms: number;
  droppedPackets: number;
  elapsedMs: number;
}

/**
 * runRelayBenchmark starts a relay on 127.0.0.1:0 with two clients, where B
 * echoes everything to A, and measures pipelined throughput and sequential
 * round-trip latency through it.
 */
export async function runRelayBenchmark(options: RelayBenchmarkOptions): Promise<RelayBenchmarkResult> {
  const { packets, size } = options;
  if (!Number.isInteger(packets) || packets < 1) throw new Error('runRelayBenchmark: packets must be a positive integer');
  if (!Number.isInteger(size) || size < 1 || size > 65536) throw new Error('runRelayBenchmark: size must be 1..65536');
  const window = options.window ?? 64;
  const latencySamples = options.latencySamples ?? Math.min(packets, 2000);

  const derp = new DerpServer({ privateKey: generateDerpKeyPair().privateKey, sendQueueDepth: Math.max(32, window * 2) });
  const http = createServer((req, res) => {
    if (!derp.handleRequest(req, res)) {
      res.writeHead(404);
      res.end();
    }
  });
  http.on('upgrade', (req, socket, head) => {
    if (!derp.handleUpgrade(req, socket, head)) socket.destroy();
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}/derp`;
  const a = await DerpClient.connect({ url });
  const b = await DerpClient.connect({ url });
  const started = performance.now();
  try {
    b.onMessage((m: DerpMessage) => {
      if (m.type === 'packet') b.send(m.source, m.data);
    });
    const payload = Buffer.alloc(size, 0x5a);
    const bKey = b.publicKey;

    // Throughput: keep `window` packets in flight and count echoes.
    let sent = 0;
    let received = 0;
    const throughputStart = performance.now();
    await new Promise<void>((resolve, reject) => {
      const stall = setInterval(() => {
        if (received === lastReceived) reject(new Error(`benchmark stalled at ${received}/${packets} echoes`));
        lastReceived = received;
      }, 2000);
      let lastReceived = -1;
      a.onMessage((m) => {
        if (m.type !== 'packet') return;
        received++;
        if (received === packets) {
          clearInterval(stall);
          resolve();
        } else if (sent < packets) {
          a.send(bKey, payload);
          sent++;
        }
      });
      for (; sent < Math.min(window, packets); sent++) a.send(bKey, payload);
    });
    const throughputMs = performance.now() - throughputStart;

    // Latency: one packet at a time.
    const samples: number[] = [];
    let pending: ((t: number) => void) | undefined;
    a.onMessage((m) => {
      if (m.type === 'packet' && pending) pending(performance.now());
    });
    for (let i = 0; i < latencySamples; i++) {
      const t0 = performance.now();
      const t1 = await new Promise<number>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('benchmark: echo timed out')), 5000);
        pending = (t) => {
          clearTimeout(timer);
          resolve(t);
        };
        a.send(bKey, payload);
      });
      samples.push(t1 - t0);
    }
    samples.sort((x, y) => x - y);
    const pct = (q: number): number => round3(samples[Math.min(samples.length - 1, Math.floor(q * samples.length))] ?? 0);
    const relayed = packets * 2;
    return {
      packets,
      size,
      packetsPerSecond: Math.round(relayed / (throughputMs / 1000)),
      megabitsPerSecond: round3((relayed * size * 8) / 1e6 / (throughputMs / 1000)),
      roundTripP50Ms: pct(0.5),
      roundTripP99Ms: pct(0.99),
      addedLatencyP50Ms: round3(pct(0.5) / 2),
      addedLatencyP99Ms: round3(pct(0.99) / 2),
      droppedPackets: derp.stats.packetsDroppedQueueFull,
      elapsedMs: round3(performance.now() - started),
    };
  } finally {
    await Promise.all([a.close(), b.close()]);
    await derp.close();
    await new Promise<void>((resolve) => http.close(() => resolve()));
  }
}

function round3(n: number): number {
  return Math.round(n * 1000) / 1000;
}
