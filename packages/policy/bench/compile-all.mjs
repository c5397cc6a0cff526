#!/usr/bin/env node
// Micro-benchmark (not a test): time to compile every node of the realistic benchmark tailnet (testkit's
// tailnet-plan) with @headway/policy, one TailnetContext per snapshot as NetworkView uses it.
// Run after `npx tsc -b`:  node packages/policy/bench/compile-all.mjs [sizes, default 1000,5000] [--reference]
// [--rounds R]
// --reference times the slow reference implementation kept in the tests (packages/policy/test/compile-reference.ts)
// instead, i.e. the compiler as it was before the per-context indexes.
// --rounds R (R >= 1) also times what the server's compiler does per change once the tailnet is there, on a context
// extended in place as NetworkView extends it, the mean of R changes of each kind:
//   - a round of 10 joins (a round of first maps in a join burst): extending the context, the grants compiled again
//     with the first joiner's filter, the peer index built again with its peers, the other joiners compiled, and
//     then every node's peers and filter (what the flush after such rounds asks);
//   - a tag change (a device moved between two tags, as the benchmark's tag change does): extending, then every
//     node's filter and peers.
// These are figures for the whole-run benchmark's context work alone, without the sessions, framing or sockets,
// and steadier than it (its figures move 10-40% with the machine).
import { performance } from 'node:perf_hooks';

const args = process.argv.slice(2);
const reference = args.includes('--reference');
const roundsAt = args.indexOf('--rounds');
const rounds = roundsAt >= 0 ? Number(args[roundsAt + 1]) : 0;
if (roundsAt >= 0 && !(Number.isInteger(rounds) && rounds >= 1)) {
  console.error(`--rounds needs a whole number of at least 1, got ${JSON.stringify(args[roundsAt + 1] ?? '')}`);
  process.exit(2);
}
if (rounds && reference) {
  console.error('--rounds times the extended context, which the reference implementation does not have; drop --reference');
  process.exit(2);
}
if (roundsAt >= 0) args.splice(roundsAt, 2);
const sizes = (args.find((a) => !a.startsWith('--')) ?? '1000,5000').split(',').map(Number);
const root = new URL('../../../', import.meta.url);
const { parsePolicy, compilePolicy, TailnetContext, peerListOf } = await import(new URL('packages/policy/dist/src/index.js', root).href);
const { planTailnet, planSnapshot, planRetag } = await import(new URL('packages/testkit/dist/src/index.js', root).href);
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

/** ms is a mean per change, printed. */
const ms = (total) => `${(total / rounds).toFixed(1)} ms`;

for (const n of rounds ? sizes : []) {
  const plan = planTailnet(n, 1);
  const policy = parsePolicy(plan.policy);
  const full = planSnapshot(plan);
  // Routers first: a context cannot be extended by a node advertising routes (a new one is built then).
  const order = [...full.nodes.filter((x) => x.availableRoutes.length), ...full.nodes.filter((x) => !x.availableRoutes.length)];
  const per = 10;
  let have = n - rounds * per;
  let snap = { users: full.users, nodes: order.slice(0, have) };
  const ctx = new TailnetContext(policy, snap);
  // Every node as a flush reads it: the filter and the peer class's shared list (peerListOf, no copy per node).
  const compileAll = () => { for (const x of snap.nodes) { const c = compilePolicy(policy, snap, x.id, ctx); peerListOf(c); c.packetFilter; } };
  compileAll();
  const join = { extend: 0, grants: 0, peerIndex: 0, joiners: 0, everyNode: 0 };
  for (let r = 0; r < rounds; r++) {
    have += per;
    snap = { users: full.users, nodes: order.slice(0, have) };
    const t0 = performance.now();
    if (!ctx.extend(snap)) throw new Error('the context refused a round of joins');
    const t1 = performance.now();
    const joiners = snap.nodes.slice(-per);
    const first = compilePolicy(policy, snap, joiners[0].id, ctx);
    first.packetFilter;
    const t2 = performance.now();
    first.peers;
    const t3 = performance.now();
    for (const x of joiners.slice(1)) { const c = compilePolicy(policy, snap, x.id, ctx); c.peers; c.packetFilter; }
    const t4 = performance.now();
    compileAll();
    const t5 = performance.now();
    join.extend += t1 - t0; join.grants += t2 - t1; join.peerIndex += t3 - t2; join.joiners += t4 - t3; join.everyNode += t5 - t4;
  }
  // The benchmark's tag change (planRetag): one device to another tag and back.
  const retag = planRetag(plan.devices);
  const tag = { extend: 0, everyNode: 0 };
  for (let r = 0; r < rounds; r++) {
    // The same users object: extend takes a snapshot with other users for a different tailnet.
    const moved = planSnapshot(plan, { ...retag.device, tags: retag.tagsAt(r) }).nodes[retag.device.index];
    snap = { users: full.users, nodes: snap.nodes.map((x) => (x.id === moved.id ? moved : x)) };
    const t0 = performance.now();
    if (!ctx.extend(snap)) throw new Error('the context refused a tag change');
    const t1 = performance.now();
    compileAll();
    tag.extend += t1 - t0; tag.everyNode += performance.now() - t1;
  }
  console.log(`extended N=${n}, mean of ${rounds}: a round of ${per} joins: extend ${ms(join.extend)}, grants and the first joiner's filter ` +
    `${ms(join.grants)}, peer index ${ms(join.peerIndex)}, the other joiners ${ms(join.joiners)}, then every node ${ms(join.everyNode)}; ` +
    `a tag change: extend ${ms(tag.extend)}, every node ${ms(tag.everyNode)}`);
}
