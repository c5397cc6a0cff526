/*
 * about.tsx: the running server (GET /api/v1/server): version, server_url, database, users and machines, the served
 * TLS certificate's expiry, and the cluster's instances (GET /api/v1/cluster) when it is clustered.
 */
import { call, type Schemas } from '../api.js';
import { Alert, Page, useLoad, when } from '../ui.js';

const DAY_MS = 86_400_000;

async function loadAbout() {
  const server = await call('get', '/api/v1/server');
  const cluster = server.clustered ? await call('get', '/api/v1/cluster') : undefined;
  return { server, instances: cluster?.instances ?? [] };
}

/** certificateText says where the certificate comes from and when it expires, in days from now. */
function certificateText(tls: NonNullable<Awaited<ReturnType<typeof loadAbout>>['server']['tls']>): string {
  const from = tls.source === 'letsencrypt' ? "Let's Encrypt" : 'tls_cert_path';
  if (!tls.notAfter) return `${from}: no certificate issued yet`;
  const days = Math.floor((new Date(tls.notAfter).getTime() - Date.now()) / DAY_MS);
  const left = days < 0 ? 'expired' : days === 0 ? 'expires today' : `${days} ${days === 1 ? 'day' : 'days'} left`;
  return `${from}: expires ${when(tls.notAfter)} (${left})`;
}

export function AboutPage(_props: { arg?: string }) {
  const about = useLoad(loadAbout);
  const s = about.value?.server;
  return (
    <Page title="About">
      <Alert error={about.error} />
      {!s ? (about.loading ? <p class="loading">Loading…</p> : null) : (
        <>
          <dl class="facts">
            <dt>Version</dt><dd>{s.version}{s.commit !== 'unknown' ? ` (${s.commit})` : ''}</dd>
            <dt>Server URL</dt><dd><code>{s.serverUrl}</code></dd>
            <dt>Database</dt><dd>{s.database.description.startsWith(s.database.type) ? <code>{s.database.description}</code> : <>{s.database.type} <code>{s.database.description}</code></>}</dd>
            <dt>Users</dt><dd>{s.counts.users}</dd>
            <dt>Machines</dt><dd>{s.counts.nodes} ({s.counts.onlineNodes} online)</dd>
            <dt>TLS certificate</dt>
            <dd class={s.tls && s.tls.status !== 'pass' ? 'warn' : undefined}>
              {s.tls ? certificateText(s.tls) : 'None served here: plain HTTP (TLS, if any, ends at a proxy in front)'}
            </dd>
            <dt>Cluster</dt><dd>{s.clustered ? `${about.value!.instances.length} instances share the database` : 'Single instance'}</dd>
          </dl>
          {s.clustered ? <Instances instances={about.value!.instances} /> : null}
        </>
      )}
    </Page>
  );
}

function Instances(props: { instances: Schemas['ClusterInstance'][] }) {
  return (
    <section aria-labelledby="instances">
      <h2 id="instances">Instances</h2>
      <table class="stack">
        <caption class="visually-hidden">Cluster instances</caption>
        <thead><tr><th scope="col">Address</th><th scope="col">State</th><th scope="col">Sessions</th><th scope="col">Started</th><th scope="col">Heartbeat</th></tr></thead>
        <tbody>
          {props.instances.map((i) => (
            <tr key={i.id}>
              <td data-label="Address"><code>{i.address}</code>{i.self ? <span class="badge">this one</span> : null}</td>
              <td data-label="State" class={i.live ? 'online' : 'offline'}>{i.live ? 'live' : 'silent'}</td>
              <td data-label="Sessions">{i.sessions}</td>
              <td data-label="Started">{when(i.startedAt)}</td>
              <td data-label="Heartbeat">{when(i.heartbeat)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
