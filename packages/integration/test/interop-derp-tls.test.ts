/**
 * The embedded relay is reachable with an http:// server_url: stock tailscaled clients run WITHOUT
 * TS_DEBUG_USE_DERP_HTTP, i.e. they dial DERP over TLS as they do in real
 * life, against a server with the default http:// server_url. They must reach
 * each other through Headway's relay (TS_DEBUG_ALWAYS_USE_DERP=1 forces the
 * relay on one machine, as in interop-derp.test.ts), report no relay problem
 * in Health, and never log a TLS mismatch.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { startTestServer } from '../src/server.js';
import { requireTailscale, TailscaleDevice, type TailscalePeerStatus, type TailscaleStatus } from '../src/tailscale.js';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function peerByHost(st: TailscaleStatus, host: string): TailscalePeerStatus | undefined {
  return Object.values(st.Peer ?? {}).find((p) => p.HostName === host);
}

function ipv4Of(st: TailscaleStatus): string {
  const ip = (st.TailscaleIPs ?? []).find((a) => a.includes('.'));
  if (!ip) throw new Error(`no IPv4 in status: ${JSON.stringify(st.TailscaleIPs)}`);
  return ip;
}

/** relayNodeSeen is the embedded relay's DERP node as the client's netmap holds it. */
async function relayNodeSeen(d: TailscaleDevice): Promise<Record<string, unknown>> {
  const r = await d.cliOk(['debug', 'netmap']);
  const nm = JSON.parse(r.stdout) as { DERPMap?: { Regions?: Record<string, { Nodes?: Array<Record<string, unknown>> }> } };
  return nm.DERPMap?.Regions?.['999']?.Nodes?.[0] ?? {};
}

const installed = requireTailscale(t);
for (const binaries of installed) {
  t.test(`${binaries.version}: relay over TLS with the default http:// server_url, no TS_DEBUG_USE_DERP_HTTP`, async (t) => {
    const s = await startTestServer({});
    const devices: TailscaleDevice[] = [];
    t.teardown(async () => {
      for (const d of devices) await d.stop().catch(() => undefined);
      await s.stop();
    });
    t.match(s.urls.http, /^http:\/\//, 'the server_url is plain http');
    const relayPort = s.relay.listener?.address().port;
    t.ok(relayPort, `the relay has its own TLS port (${relayPort})`);
    const user = await s.state.users.create({ name: 'alice' });
    const key = (await s.state.keys.createPreAuthKey({ userId: user.id, reusable: true })).secret;
    const tag = binaries.version.replace(/\W/g, '');
    const start = async (name: string): Promise<TailscaleDevice> => {
      const d = await TailscaleDevice.start({
        name: `${name}${tag}`,
        version: binaries.version,
        // An empty value turns the harness default TS_DEBUG_USE_DERP_HTTP=1 off: DERP over TLS, as shipped.
        env: { TS_DEBUG_ALWAYS_USE_DERP: '1', TS_DEBUG_USE_DERP_HTTP: '' },
      });
      devices.push(d);
      await d.up({ loginServer: s.urls.http, authKey: key, hostname: name, timeoutMs: 60_000 });
      return d;
    };
    const [a, b] = await Promise.all([start('tls-a'), start('tls-b')]);
    t.equal(a.env.TS_DEBUG_USE_DERP_HTTP ?? '', '', 'the daemon runs without TS_DEBUG_USE_DERP_HTTP');
    const stA = await a.waitFor((st) => peerByHost(st, 'tls-b')?.Online === true, 20_000);
    const stB = await b.waitFor((st) => peerByHost(st, 'tls-a')?.Online === true, 20_000);
    const nodeA = s.state.nodes.list().find((n) => n.hostname === 'tls-a')!;
    const nodeB = s.state.nodes.list().find((n) => n.hostname === 'tls-b')!;

    const seen = await relayNodeSeen(a);
    t.equal(seen.DERPPort, relayPort, 'the client was sent the TLS port');
    const pinning = /^v?1\.(8[2-9]|9\d|\d{3,})\./.test(binaries.version);
    if (pinning) {
      t.match(seen.CertName, /^sha256-raw:[0-9a-f]{64}$/, `${binaries.version} gets the certificate pin`);
      t.notOk(seen.InsecureForTests, 'and no InsecureForTests');
    } else {
      t.equal(seen.InsecureForTests, true, `${binaries.version} cannot pin: unverified TLS`);
      t.notOk(seen.CertName, 'and no CertName it would misread');
    }

    const deadline = Date.now() + 30_000;
    while (!(s.relay.derp!.isConnected(nodeA.nodeKey) && s.relay.derp!.isConnected(nodeB.nodeKey)) && Date.now() < deadline) await sleep(100);
    t.ok(s.relay.derp!.isConnected(nodeA.nodeKey) && s.relay.derp!.isConnected(nodeB.nodeKey), 'both clients hold a relay connection');
    const ping = await a.ping(ipv4Of(stB), { count: 3, timeoutMs: 5000 });
    t.equal(ping.via, 'DERP(headway)', `disco ping answered via the relay: ${ping.output.trim().split('\n').at(-1)}`);
    const back = await b.ping(ipv4Of(stA), { count: 3, timeoutMs: 5000 });
    t.equal(back.via, 'DERP(headway)', 'and the other way');
    const tsmp = await a.ping(ipv4Of(stB), { tsmp: true, count: 1, timeoutMs: 5000 });
    t.match(tsmp.output, /via TSMP/, 'TSMP ping through WireGuard over the relay');
    const conns = s.relay.listener!.connections;
    t.ok(conns.tls >= 2, `the clients reached the relay over TLS (${conns.tls} TLS connections)`);
    t.equal(conns.plain, 0, 'and never over plain HTTP');

    for (const d of [a, b]) {
      const st = await d.status();
      const health = st.Health ?? [];
      t.notOk(health.some((h) => /relay|DERP/i.test(h)), `${d.name}: no relay problem in Health (${health.length ? health.join(' | ') : 'none'})`);
      const log = readFileSync(d.logPath, 'utf8');
      const mismatches = log.split('\n').filter((l) => l.includes('does not look like a TLS handshake')).length;
      t.equal(mismatches, 0, `${d.name}: tailscaled logged no TLS mismatch`);
      const derpErrors = log.split('\n').filter((l) => /derphttp\.Client\.Connect: .*(tls|x509|certificate)/i.test(l));
      t.same(derpErrors, [], `${d.name}: no TLS or certificate error dialing the relay`);
    }
    const failures = s.logs.filter((l) => l.includes('relay connection failed its handshake'));
    t.comment(`${binaries.version}: server handshake-failure lines: ${failures.length}${failures.length ? `\n${failures.join('\n')}` : ''}`);
    t.notOk(failures.some((l) => /TLS/.test(l)), 'the server saw no failed TLS handshake');
  });
}
