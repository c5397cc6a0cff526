import { TestDevice, type RegisterOptions } from '@headway/testkit';

/** JOIN_ATTEMPTS bounds retries of a join whose dial timed out (the server is saturated, not broken). */
export const JOIN_ATTEMPTS = 3;

/** JoinPhases: how long the successful attempt of a join spent dialing (`GET /key`, TCP and the Noise handshake),
 * registering, and waiting for its first map (from the map request to the first MapResponse applied), in ms. */
export interface JoinPhases { connectMs: number; registerMs: number; firstMapMs: number }

/**
 * joinDevice connects, registers and opens the map stream of a benchmark device. A dial that
 * timed out under load is retried, as tailscaled does, with the device's identity kept (a new
 * TestDevice with the same keys) so a register that did land is not counted as a second node.
 * remake makes that replacement (by default a device with the same keys and `keep`).
 * Returns the device that joined (the original or its replacement), how many retries it took and where the time of
 * its last attempt went.
 */
export async function joinDevice(
  first: TestDevice, register: RegisterOptions, remake: (d: TestDevice) => TestDevice = sameKeys,
): Promise<{ device: TestDevice; retries: number; phases: JoinPhases }> {
  let d = first;
  for (let attempt = 1; ; attempt++) {
    try {
      const t0 = performance.now();
      await d.connect();
      const t1 = performance.now();
      const reply = await d.register(register);
      if (reply.Error) throw new Error(`register ${d.hostname}: ${reply.Error}`);
      const t2 = performance.now();
      await d.startMap({ stream: true });
      const phases = { connectMs: t1 - t0, registerMs: t2 - t1, firstMapMs: performance.now() - t2 };
      return { device: d, retries: attempt - 1, phases };
    } catch (err) {
      const message = (err as Error).message;
      if (attempt >= JOIN_ATTEMPTS || !/timed out|ECONNRESET|socket hang up|fetch failed/i.test(message)) {
        throw new Error(`join ${d.hostname} failed (attempt ${attempt}): ${message}`);
      }
      await d.close().catch(() => undefined);
      d = remake(d);
      await new Promise((r) => setTimeout(r, 250 * attempt));
    }
  }
}

/**
 * redial connects a device that had joined again and opens its map stream, retrying (every RECONNECT_RETRY_MS) a
 * dial the server refused or dropped while it starts, until `deadline` (performance.now()); returns the retries.
 */
export async function redial(d: TestDevice, deadline: number): Promise<number> {
  for (let retries = 0; ; retries++) {
    try {
      await d.close().catch(() => undefined);
      await d.connect();
      await d.startMap({ stream: true });
      return retries;
    } catch (err) {
      if (performance.now() > deadline) throw new Error(`reconnect ${d.hostname} failed after ${retries + 1} attempts: ${(err as Error).message}`);
      await new Promise((r) => setTimeout(r, RECONNECT_RETRY_MS));
    }
  }
}

/** RECONNECT_RETRY_MS: a device whose dial failed during a restart tries again this much later (tailscaled backs off from ~1 s). */
export const RECONNECT_RETRY_MS = 500;

function sameKeys(d: TestDevice): TestDevice {
  return new TestDevice({ serverUrl: d.serverUrl, hostname: d.hostname, machineKey: d.machineKey, nodeKey: d.nodeKey, discoKey: d.discoKey, ...(d.keep ? { keep: d.keep } : {}) });
}

/** runPool runs `work(i)` for i in [0, count) with at most `limit` in flight; the first failure rejects. */
export async function runPool(count: number, limit: number, work: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  let failed: Error | undefined;
  const lane = async (): Promise<void> => {
    while (!failed && next < count) {
      const i = next++;
      try {
        await work(i);
      } catch (err) {
        failed ??= err as Error;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, count) }, lane));
  if (failed) throw failed;
}
