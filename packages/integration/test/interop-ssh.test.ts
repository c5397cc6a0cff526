/**
 * Real-client interop for Tailscale SSH: stock tailscaled clients (every
 * installed version) join a Headway server whose policy lets alice SSH as root
 * into her own devices, and `tailscale ssh` (the system OpenSSH client with
 * `tailscale nc` as its ProxyCommand) runs a command on the Tailscale SSH
 * server that the other device's tailscaled serves through netstack.
 *
 * alice's two devices join one after another and get adjacent addresses. Merged
 * into one principal {"nodeIP": "100.64.0.1-100.64.0.2"} they would match nothing:
 * the client parses nodeIP as a single address, and `tailscale ssh root@node-b`
 * is refused ("tailnet policy does not permit you to SSH to this node").
 * The test reads the SSH policy node-b received (every nodeIP one address)
 * and makes the connection.
 *
 * Refusals: an SSH user the rule does not list (nobody), and a device of bob,
 * whom the packet filter lets reach port 22 but no SSH rule names, are both
 * refused by the SSH server (OpenSSH exits 255, not a timeout), with the
 * policy's reason on clients that send one.
 *
 * A compiler that merged adjacent addresses would give node-b the principals
 * ["100.64.0.1-100.64.0.2", "fd7a:115c:a1e0::1-fd7a:115c:a1e0::2"], and
 * `tailscale ssh root@node-b id` would exit 255 on both clients.
 */
import t, { type Test } from 'tap';
import { isIP } from 'node:net';
import { startTestServer } from '../src/server.js';
import { cleanupStack, requireTailscale, TailscaleDevice, type CommandResult, type NetworkMapJson, type TailscalePeerStatus } from '../src/tailscale.js';

/**
 * POLICY: alice reaches all her devices' ports, bob only port 22 on them (so his SSH attempt reaches the SSH
 * server and is refused there, by the SSH policy, rather than dropped by the packet filter); the one SSH rule
 * lets alice in as root on her own devices.
 */
const POLICY = {
  acls: [
    { action: 'accept', src: ['alice@'], dst: ['alice@:*'] },
    { action: 'accept', src: ['bob@'], dst: ['alice@:22'] },
  ],
  ssh: [{ action: 'accept', src: ['alice@'], dst: ['alice@'], users: ['root'] }],
};

/** SSH_TIMEOUT_MS bounds one `tailscale ssh` run: a hang ends the run and fails the assertions on its exit code. */
const SSH_TIMEOUT_MS = 60_000;

/** SshPolicyJson is tailcfg.SSHPolicy as `tailscale debug netmap` prints it (the netmap's SSHPolicy). */
interface SshPolicyJson {
  rules?: Array<{
    principals?: Array<{ nodeIP?: string; node?: string; userLogin?: string; any?: boolean }> | null;
    sshUsers?: Record<string, string> | null;
    action?: { accept?: boolean; reject?: boolean; message?: string } | null;
  }> | null;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** waitNetmap polls `tailscale debug netmap` until check holds; the timeout error shows the peers and SSH policy last seen. */
function waitNetmap(d: TailscaleDevice, check: (nm: NetworkMapJson) => boolean, timeoutMs: number): Promise<NetworkMapJson> {
  return d.waitNetmap(check, { timeoutMs, intervalMs: 200, brief: (nm) => ({ Peers: (nm.Peers ?? []).map((p) => p.Name), SSHPolicy: nm.SSHPolicy }) });
}

/** selfIps are a netmap's own addresses without their /32 and /128. */
function selfIps(nm: NetworkMapJson): string[] {
  return (((nm.SelfNode ?? {}) as { Addresses?: string[] }).Addresses ?? []).map((a) => a.replace(/\/(32|128)$/, ''));
}

function sshPolicy(nm: NetworkMapJson): SshPolicyJson | null {
  return (nm.SSHPolicy as SshPolicyJson | null | undefined) ?? null;
}

/** ipv4Number reads a dotted IPv4 address as a number, to tell adjacent addresses. */
function ipv4Number(ip: string): number {
  return ip.split('.').reduce((n, o) => n * 256 + Number(o), 0);
}

/** ssh runs `tailscale ssh <target> <command...>` on a device: OpenSSH through `tailscale nc`, no terminal, no stdin. */
function ssh(d: TailscaleDevice, target: string, command: string[]): Promise<CommandResult> {
  return d.cli(['ssh', target, ...command], { timeoutMs: SSH_TIMEOUT_MS });
}

/**
 * explainsDenials: newer clients (1.84 on, by the first reports of their banners; 1.102.5 here) send the SSH
 * policy's reason for a refusal as an SSH banner ("tailscale: tailnet policy does not permit you to SSH ..."),
 * which OpenSSH prints; older ones (1.80.3 here) only fail authentication, and OpenSSH prints
 * "Permission denied (tailscale)" (the placeholder method tailssh offers).
 */
function explainsDenials(version: string): boolean {
  const [major = 0, minor = 0] = version.replace(/^v/, '').split('.').map(Number);
  return major > 1 || (major === 1 && minor >= 84);
}

/**
 * assertRefused checks that a `tailscale ssh` run was refused by node-b's Tailscale SSH server (not timed out,
 * not failed on the way there): OpenSSH's exit status 255, the refusal on stderr (the policy's reason where the
 * client sends one), and nothing from the command on stdout.
 */
function assertRefused(t: Test, version: string, r: CommandResult, reason: RegExp): void {
  t.equal(r.timedOut, false, 'refused, not timed out');
  t.equal(r.code, 255, `tailscale ssh fails with OpenSSH's 255 (${describe(r)})`);
  if (explainsDenials(version)) t.match(r.stderr, reason, `the client explains the refusal: ${reason.source}`);
  else t.match(r.stderr, /Permission denied \(tailscale\)/, 'the SSH server refuses authentication (this client sends no reason)');
  t.notMatch(r.stdout, /uid=/, 'no command ran');
}

/** describe is a command's outcome for assertion messages. */
function describe(r: CommandResult): string {
  const how = r.timedOut ? 'timed out' : r.signal !== null ? `killed by ${r.signal}` : `exit ${r.code}`;
  return `${how}; stdout: ${JSON.stringify(r.stdout.trim().slice(-500))}; stderr: ${JSON.stringify(r.stderr.trim().slice(-1000))}`;
}

const installed = requireTailscale(t);
for (const binaries of installed) {
  t.test(binaries.version, async (t) => {
    const cleanups = cleanupStack(t);
    // The embedded relay: a client reports Running only with a live DERP connection or a live peer.
    const s = await startTestServer({ policy: { mode: 'database' }, derp: { server: { enabled: true, stun_listen_addr: '127.0.0.1:0' } } });
    cleanups.push(() => s.stop());
    await s.policy.set(JSON.stringify(POLICY));
    const alice = await s.state.users.create({ name: 'alice' });
    const bob = await s.state.users.create({ name: 'bob' });
    const aliceKey = (await s.state.keys.createPreAuthKey({ userId: alice.id, reusable: true })).secret;
    const bobKey = (await s.state.keys.createPreAuthKey({ userId: bob.id, reusable: true })).secret;

    const tag = binaries.version.replace(/\W/g, '');
    const start = async (name: string, key: string, extraArgs: string[] = []): Promise<TailscaleDevice> => {
      const d = await TailscaleDevice.start({ name: `${name}${tag}`, version: binaries.version });
      cleanups.push(() => d.stop());
      // Runs before the stop above: on failure the daemon log says why (policy evaluation, the incubator).
      cleanups.push(() => {
        if (!t.passing()) t.comment(`--- ${d.name} tailscaled log (end) ---\n${d.logTail(6000)}`);
      });
      await d.up({ loginServer: s.urls.http, authKey: key, hostname: name, extraArgs, timeoutMs: 60_000 });
      return d;
    };
    // One after another, so the allocator hands out consecutive addresses: the case the merge broke.
    const nodeA = await start('node-a', aliceKey);
    const nodeB = await start('node-b', aliceKey, ['--ssh']);
    const bobDev = await start('bob-dev', bobKey);

    const aNm = await waitNetmap(nodeA, (nm) => selfIps(nm).length === 2, 30_000);
    const bNm0 = await waitNetmap(nodeB, (nm) => selfIps(nm).length === 2, 30_000);
    const aIps = selfIps(aNm);
    const bIps = selfIps(bNm0);
    const aV4 = aIps.find((ip) => isIP(ip) === 4)!;
    const bV4 = bIps.find((ip) => isIP(ip) === 4)!;
    t.equal(ipv4Number(bV4) - ipv4Number(aV4), 1, `node-a (${aV4}) and node-b (${bV4}) have adjacent IPv4 addresses`);

    await t.test('node-b runs the Tailscale SSH server and advertises its host keys', async (t) => {
      const prefs = await nodeB.prefs();
      t.equal(prefs.RunSSH, true, 'node-b prefs: RunSSH');
      const st = await nodeA.waitFor((st) => Object.values(st.Peer ?? {}).some((p) => p.HostName === 'node-b' && ((p.sshHostKeys as string[] | undefined) ?? []).length > 0), 30_000);
      const peer = Object.values(st.Peer ?? {}).find((p: TailscalePeerStatus) => p.HostName === 'node-b')!;
      t.ok(((peer.sshHostKeys as string[] | undefined) ?? []).every((k) => /^ssh-[a-z0-9-]+ \S+$|^ecdsa-sha2-\S+ \S+$/.test(k.trim())), 'node-a sees node-b\'s SSH host keys (tailscale ssh writes them to known_hosts)');
    });

    await t.test("node-b's SSH policy names each of alice's addresses on its own", async (t) => {
      const bNm = await waitNetmap(nodeB, (nm) => (sshPolicy(nm)?.rules ?? []).length > 0, 30_000);
      const rules = sshPolicy(bNm)?.rules ?? [];
      t.equal(rules.length, 1, 'one SSH rule on node-b');
      const rule = rules[0]!;
      t.same(rule.sshUsers, { root: 'root' }, 'the rule lets in root as root');
      t.equal(rule.action?.accept, true, 'the rule accepts');
      const nodeIps = (rule.principals ?? []).map((p) => p.nodeIP ?? '');
      // The client compares nodeIP with the connection's source after parsing it as one address: a range
      // ("100.64.0.1-100.64.0.2") or a prefix parses as nothing and matches no connection.
      t.ok(nodeIps.length > 0 && nodeIps.every((ip) => isIP(ip) !== 0), `every principal's nodeIP is a single address: ${JSON.stringify(nodeIps)}`);
      t.same([...nodeIps].sort(), [...aIps, ...bIps].sort(), "the principals are exactly alice's devices' addresses");
      t.ok(nodeIps.includes(aV4), `node-a's IPv4 (${aV4}) is a principal`);
      const bobIps = selfIps((await waitNetmap(bobDev, (nm) => selfIps(nm).length === 2, 30_000)));
      t.notOk(nodeIps.some((ip) => bobIps.includes(ip)), "bob's device is not a principal");
    });

    await t.test('tailscale ssh root@node-b id from node-a runs as root', async (t) => {
      const r = await ssh(nodeA, 'root@node-b', ['id']);
      t.equal(r.timedOut, false, 'tailscale ssh finished');
      t.equal(r.code, 0, `tailscale ssh exits 0 (${describe(r)})`);
      t.match(r.stdout, /^uid=0\(root\) gid=0\(root\)/m, 'id prints uid=0(root)');
      t.notMatch(r.stderr, /does not permit/, 'no policy refusal');
    });

    await t.test("tailscale ssh to node-b's IPv4 address works the same", async (t) => {
      const r = await ssh(nodeA, `root@${bV4}`, ['id', '-un']);
      t.equal(r.code, 0, `tailscale ssh exits 0 (${describe(r)})`);
      t.equal(r.stdout.trim(), 'root', 'id -un prints root');
    });

    await t.test('an SSH user the rule does not list (nobody) is refused', async (t) => {
      const r = await ssh(nodeA, 'nobody@node-b', ['id']);
      assertRefused(t, binaries.version, r, /tailnet policy does not permit you to SSH as user "nobody"/);
    });

    await t.test("bob's device reaches port 22 but no SSH rule lets bob in", async (t) => {
      // The packet filter lets bob through to port 22, so the refusal is the SSH policy's.
      const bNm = await nodeB.netmap();
      t.ok((bNm?.Peers ?? []).some((p) => String(p.Name ?? '').startsWith('bob-dev')), 'bob-dev is a peer of node-b');
      const r = await ssh(bobDev, `root@${bV4}`, ['id']);
      assertRefused(t, binaries.version, r, /tailnet policy does not permit you to SSH to this node/);
    });
  });
}
