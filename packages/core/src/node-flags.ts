import type { HeadwayConfig } from './config/schema.js';

/**
 * SERVER_SEMI_SPACE_MB is the young generation's semi-space of `headway serve` (--max-semi-space-size). V8 sizes it
 * from the machine's memory (64 MiB of new space on a large host once a burst has grown it). Smaller holds less
 * after a burst, but a join's short-lived maps then outlive their scavenge and are promoted: at 2 MiB a
 * 10,000-device join cost 13-20% more server CPU than at 16 or 32, which cost the same (docs/performance.md,
 * "Memory"). The young generation a burst grew is given back by the server's heap reducer once it is quiet.
 */
export const SERVER_SEMI_SPACE_MB = 16;

/**
 * SERVER_HEAP_LIMIT_MB is the old generation's limit when memory.heap_limit_mb is 0 and Node would allow more (it
 * sizes the heap from the machine's memory: 4 GiB on a large host). V8 lets the heap grow between full collections
 * by a factor that rises with the limit, to 4 at 2 GiB and above and about 1.6 at 1 GiB, so on a large host a burst
 * held up to four times the live heap; at 1 GiB the peak of a 1,000-device join is 50-100 MiB lower for the same CPU
 * (docs/performance.md, "Memory"). The live heap is about 30 KiB per connected device: past ~20,000 devices set
 * memory.heap_limit_mb higher (the server warns at start when the stored tailnet comes near it).
 */
export const SERVER_HEAP_LIMIT_MB = 1024;

/** NodeFlag is one V8 option the server sets at start. */
interface NodeFlag { flag: string; value: number }

/**
 * serverNodeFlags are the V8 options `headway serve` runs under: the semi-space above, and the old generation's
 * limit: `memory.heap_limit_mb` when set, else SERVER_HEAP_LIMIT_MB where Node's own limit (`nodeLimitMb`, what it
 * sized from the machine's or the container's memory) is larger. An option the operator already gave (on the
 * command line or in NODE_OPTIONS, `given`) is left alone.
 */
export function serverNodeFlags(config: Pick<HeadwayConfig, 'memory'>, given: readonly string[], nodeLimitMb: number): string[] {
  const wanted: NodeFlag[] = [{ flag: '--max-semi-space-size', value: SERVER_SEMI_SPACE_MB }];
  if (config.memory.heap_limit_mb > 0) wanted.push({ flag: '--max-old-space-size', value: config.memory.heap_limit_mb });
  else if (nodeLimitMb > SERVER_HEAP_LIMIT_MB) wanted.push({ flag: '--max-old-space-size', value: SERVER_HEAP_LIMIT_MB });
  const named = (arg: string) => arg.split('=')[0]!.replaceAll('_', '-');
  const set = new Set(given.map(named));
  return wanted.filter((w) => !set.has(w.flag)).map((w) => `${w.flag}=${w.value}`);
}

/**
 * nodeOptionsArgs splits NODE_OPTIONS as Node reads it: options separated by spaces, a double-quoted one taken whole
 * without its quotes (with \" and \\ inside).
 */
export function nodeOptionsArgs(text: string | undefined): string[] {
  const out: string[] = [];
  for (const m of (text ?? '').matchAll(/"((?:[^"\\]|\\.)*)"|(\S+)/g)) out.push(m[1] !== undefined ? m[1].replace(/\\(.)/g, '$1') : m[2]!);
  return out;
}
