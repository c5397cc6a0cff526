import { PolicyError } from './hujson.js';
import { ALL, IPSet, type Addr } from './ip.js';
import { parseAlias, parsePortList, type Alias, type Policy } from './policy.js';
import { TailnetContext, type FilterRule, type Snapshot } from './compile.js';

const DEFAULT_PROTOS = [6, 17, 1, 58];

/** filterAllows reports whether a node's filter admits one (src, dst, port, proto) packet. */
export function filterAllows(rules: FilterRule[], src: Addr, dst: Addr, port: number, proto: number): boolean {
  return rules.some((r) => {
    if (!r.DstPorts) return false;
    if (!(r.IPProto ?? DEFAULT_PROTOS).includes(proto)) return false;
    if (!ruleSources(r).containsAddr(src)) return false;
    return r.DstPorts.some((d) => (d.IP === '*' ? ALL : IPSet.of(d.IP)).containsAddr(dst) &&
      (proto !== 6 && proto !== 17 && proto !== 132 ? true : d.Ports.First <= port && port <= d.Ports.Last));
  });
}

/** ruleSources is the set of addresses a filter rule admits traffic from. */
export function ruleSources(r: FilterRule): IPSet {
  return r.SrcIPs.reduce((s, x) => s.union(x === '*' ? ALL : IPSet.of(x)), new IPSet());
}

/** PolicyTestResult is the verdict on one entry of the `tests` or `sshTests` block: passed, or every way it failed. */
export interface PolicyTestResult {
  block: 'tests' | 'sshTests';
  index: number;
  src: string;
  passed: boolean;
  failures: string[];
}

/** runPolicyTests evaluates the `tests` and `sshTests` blocks against a snapshot and
 * throws a PolicyError ("test(s) failed: ...") naming the first failing test. */
export function runPolicyTests(policy: Policy, snapshot: Snapshot): void {
  const failed = policyTestResults(policy, snapshot).find((r) => !r.passed);
  if (failed) throw new PolicyError(`test(s) failed: ${failed.block}[${failed.index}]: ${failed.failures[0]}`);
}

/** policyTestResults evaluates every entry of the `tests` and `sshTests` blocks against a snapshot, in order. */
export function policyTestResults(policy: Policy, snapshot: Snapshot): PolicyTestResult[] {
  if (policy.tests.length === 0 && policy.sshTests.length === 0) return [];
  const ctx = new TailnetContext(policy, snapshot);
  const results: PolicyTestResult[] = [
    ...policy.tests.map((t, index) => ({ block: 'tests' as const, index, src: t.src, passed: true, failures: [] as string[] })),
    ...policy.sshTests.map((t, index) => ({ block: 'sshTests' as const, index, src: t.src, passed: true, failures: [] as string[] })),
  ];
  const fail = (block: 'tests' | 'sshTests', index: number, why: string) => {
    const r = results.find((x) => x.block === block && x.index === index)!;
    r.passed = false;
    r.failures.push(why);
  };
  const srcAddrs = (src: string): Addr[] => {
    let alias: Alias;
    let set: IPSet;
    try {
      alias = parseAlias(src);
      set = ctx.resolve(alias) ?? new IPSet();
    } catch {
      return [];
    }
    // A user, group, tag or member/tagged autogroup names devices: each of their addresses, also where the set
    // merged two devices at adjacent addresses into one range (their tests failed, "expected accept").
    const namesDevices = alias.kind === 'user' || alias.kind === 'group' || alias.kind === 'tag' || alias.kind === 'userDomain'
      || (alias.kind === 'autogroup' && (alias.name === 'autogroup:member' || alias.name === 'autogroup:tagged'));
    if (namesDevices) return ctx.infos.flatMap((i) => i.addrs.filter((a) => set.containsAddr(a)));
    return set.ranges.filter((r) => r.start === r.end).map((r) => ({ v6: r.v6, n: r.start }));
  };
  const filterFor = (dst: Addr): FilterRule[] => {
    const owner = ctx.infos.find((i) => i.addrs.some((a) => a.v6 === dst.v6 && a.n === dst.n)) ??
      ctx.infos.find((i) => i.subnetSet.containsAddr(dst));
    return owner ? ctx.packetFilter(owner) : ctx.unreducedRules(ctx.infos[0]!);
  };
  policy.tests.forEach((t, idx) => {
    const srcs = srcAddrs(t.src);
    const protos = t.proto ?? [6];
    if (srcs.length === 0) fail('tests', idx, `src ${JSON.stringify(t.src)} matches no device`);
    // A test destination names one device address and one port; anything broader
    // (CIDRs, autogroups, "*", port lists or ranges) cannot be tested and fails.
    const check = (entry: string, want: boolean) => {
      const m = /^(?:\[([^\]]+)\]|(.*)):([^:]*)$/.exec(entry);
      if (!m) throw new Error(`${JSON.stringify(entry)} has no port`);
      const aliasText = m[1] ?? m[2]!;
      if (!/^\d+$/.test(m[3]!) || Number(m[3]) < 1 || Number(m[3]) > 65535) throw new Error(`${JSON.stringify(entry)}: port must be one number`);
      const port = Number(m[3]);
      const alias = parseAlias(aliasText);
      if (alias.kind === 'wildcard' || alias.kind === 'autogroup' || (alias.kind === 'prefix' && aliasText.includes('/'))) {
        throw new Error(`${JSON.stringify(entry)}: destination must be a single host`);
      }
      const dstSet = ctx.resolve(alias) ?? new IPSet();
      const dsts = ctx.infos.flatMap((i) => i.addrs).filter((a) => dstSet.containsAddr(a));
      if (srcs.length === 0 || dsts.length === 0) throw new Error(`${t.src} -> ${entry}: no device to test`);
      for (const d of dsts) {
        const rules = filterFor(d);
        for (const s of srcs.filter((x) => x.v6 === d.v6)) {
          for (const proto of protos) {
            if (filterAllows(rules, s, d, port, proto) !== want) {
              throw new Error(`${t.src} -> ${entry} expected ${want ? 'accept' : 'deny'}`);
            }
          }
        }
      }
    };
    const guarded = (entry: string, want: boolean) => {
      try {
        check(entry, want);
      } catch (e) {
        fail('tests', idx, (e as Error).message);
      }
    };
    if (t.accept.length === 0 && t.deny.length === 0) fail('tests', idx, 'no accept or deny');
    for (const a of t.accept) guarded(a, true);
    for (const d of t.deny) guarded(d, false);
  });
  policy.sshTests.forEach((t, idx) => {
    const srcs = srcAddrs(t.src);
    if (t.accept.length + t.check.length + t.deny.length === 0) fail('sshTests', idx, 'no users to test');
    const dstNodes = t.dst.flatMap((d) => {
      // SSH test destinations are matched on IPv4 only; an IPv6 literal names no device.
      if (d.includes(':') && !/^[a-z]+:/.test(d)) return [];
      const set = ctx.resolve(parseAlias(d)) ?? new IPSet();
      return ctx.infos.filter((i) => i.addrs.some((a) => set.containsAddr(a)));
    });
    if (dstNodes.length === 0) fail('sshTests', idx, 'dst matches no device');
    const srcTexts = new Set(srcs.map((a) => new IPSet([{ v6: a.v6, start: a.n, end: a.n }]).strings()[0]!));
    const verdict = (node: (typeof dstNodes)[number], user: string): 'accept' | 'check' | 'deny' => {
      if (user === '') return 'deny';
      for (const r of ctx.sshRules(node) ?? []) {
        if (!r.principals.some((p) => srcTexts.has(p.nodeIP))) continue;
        const mapped = r.sshUsers[user] ?? (user !== 'root' ? r.sshUsers['*'] : undefined);
        if (!mapped) continue;
        return r.action.holdAndDelegate ? 'check' : 'accept';
      }
      return 'deny';
    };
    for (const node of dstNodes) {
      for (const u of t.accept) if (verdict(node, u) !== 'accept') fail('sshTests', idx, `${t.src} -> ${u}@${node.node.name} expected accept`);
      for (const u of t.check) if (verdict(node, u) !== 'check') fail('sshTests', idx, `${t.src} -> ${u}@${node.node.name} expected check`);
      for (const u of t.deny) if (verdict(node, u) !== 'deny') fail('sshTests', idx, `${t.src} -> ${u}@${node.node.name} expected deny`);
    }
  });
  return results;
}
