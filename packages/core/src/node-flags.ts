import type { HeadwayConfig } from './config/schema.js';

/**
 * SERVER_SEMI_SPACE_MB is the young generation's semi-space of `headway serve` (--max-semi-space-size). V8 sizes
 * it from the machine's memory (up to 32 MiB each on a large host, 64 MiB of new space once grown) and a burst
 * of joins grows it to that size for good; a small one keeps an idle server small, and the server's short-lived
 * garbage (a flush's messages) is collected as often at this size without a measurable cost per change
 * (docs/performance.md, "Memory").
 */
export const SERVER_SEMI_SPACE_MB = 2;

/** NodeFlag is one V8 option the server sets at start, and the config key or knob it comes from. */
export interface NodeFlag { flag: string; value: number; from: string }

/**
 * serverNodeFlags are the V8 options `headway serve` runs under: the semi-space above, and the old generation's
 * limit from `memory.heap_limit_mb` when set (otherwise Node sizes it from the machine's or the container's
 * memory). An option the operator already gave (on the command line or in NODE_OPTIONS, `given`) is left alone.
 */
export function serverNodeFlags(config: Pick<HeadwayConfig, 'memory'>, given: readonly string[]): string[] {
  const wanted: NodeFlag[] = [{ flag: '--max-semi-space-size', value: SERVER_SEMI_SPACE_MB, from: 'SERVER_SEMI_SPACE_MB' }];
  if (config.memory.heap_limit_mb > 0) wanted.push({ flag: '--max-old-space-size', value: config.memory.heap_limit_mb, from: 'memory.heap_limit_mb' });
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

/** NODE_FLAGS_ENV marks a server process already started again with its flags, so it is never started a third time. */
export const NODE_FLAGS_ENV = 'HEADWAY_NODE_FLAGS';
