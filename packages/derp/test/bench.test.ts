import t from 'tap';
import { runRelayBenchmark } from '../src/bench.js';

t.test('relay benchmark echoes every packet and reports sane numbers', async (t) => {
  const r = await runRelayBenchmark({ packets: 500, size: 1280, latencySamples: 100 });
  t.equal(r.packets, 500);
  t.equal(r.droppedPackets, 0, 'windowed sending never overflows the queue');
  t.ok(r.packetsPerSecond > 100, `packets/s ${r.packetsPerSecond}`);
  t.ok(r.roundTripP50Ms > 0 && r.roundTripP50Ms <= r.roundTripP99Ms, 'percentiles ordered');
  t.equal(r.addedLatencyP50Ms, Math.round((r.roundTripP50Ms / 2) * 1000) / 1000);
  await t.rejects(runRelayBenchmark({ packets: 0, size: 10 }), /packets must be a positive integer/);
  await t.rejects(runRelayBenchmark({ packets: 1, size: 70000 }), /size must be 1..65536/);
});
