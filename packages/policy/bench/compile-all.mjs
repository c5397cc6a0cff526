#!/usr/bin/env node
// Micro-benchmark (not a test): time to compile every node of the realistic benchmark tailnet (testkit's
// bench-policy plan) with @headway/policy, one TailnetContext per snapshot as NetworkView uses it.
// Run after `npx tsc -b`:  node packages/policy/bench/compile-all.mjs [sizes, default 1000,5000] [--reference]
// --reference times the slow reference implementation kept in the tests (packages/policy/test/compile-reference.ts)
// instead, i.e. the compiler as it was before the per-context indexes.
import { performance } from 'node:perf_hooks';

const args = process.argv.slice(2);
const reference = args.includes('--reference');
const sizes = (args.find((a) => !a.startsWith('--')) ?? '1000,5000').split(',').map(Number);
const root = new URL('../../../', import.meta.url);
const { parsePolicy, compilePolicy, TailnetContext } = await import(new URL('packages/policy/dist/src/index.js', root).href);
const { planTailnet, planSnapshot } = await import(new URL('packages/testkit/dist/src/index.js', root).href);
let impl = { compilePolicy, TailnetContext };
if (reference) {
  const ref = await import(new URL('packages/policy/dist/test/compile-reference.js', root).href);
  impl = { compilePolicy: ref.referenceCompilePolicy, TailnetContext: ref.ReferenceTailnetContext };
}

for (const n of sizes) {
  const plan = planTailnet(n, 1);
  const policy = parsePolicy(plan.policy);
  const snap = planSnapshot(plan);
  const t0 = performance.now();
  const ctx = new impl.TailnetContext(policy, snap);
  const t1 = performance.now();
  let peers = 0, rules = 0;
  for (const node of snap.nodes) {
    const c = impl.compilePolicy(policy, snap, node.id, ctx);
    peers += c.peers.length;
    rules += c.packetFilter.length;
  }
  const t2 = performance.now();
  console.log(`${reference ? 'reference' : 'current'} N=${n} rules=${plan.rules}: context ${(t1 - t0).toFixed(0)} ms, ` +
    `compile all nodes ${(t2 - t1).toFixed(0)} ms (${((t2 - t1) / n).toFixed(3)} ms/node), total ${(t2 - t0).toFixed(0)} ms; ` +
    `avg peers ${(peers / n).toFixed(1)}, avg filter rules ${(rules / n).toFixed(1)}`);
}
