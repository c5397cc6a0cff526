/*
 * main.tsx: the console's shell: a skip link, the navigation, the signed-in administrator and sign-out, and the page
 * the location's hash names (#/machines, #/users …). Hash routes keep every page at /admin/, so the server serves one
 * document and a reload stays where it was.
 */
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import type { FunctionComponent } from 'preact';
import { setCsrf } from './api.js';
import { loadSession, type SessionInfo } from './session.js';
import { UsersPage } from './pages/users.js';
import { MachinesPage } from './pages/machines.js';
import { KeysPage } from './pages/keys.js';
import { PolicyPage } from './pages/policy.js';
import { DnsPage } from './pages/dns.js';
import { AboutPage } from './pages/about.js';
import { AuditPage } from './pages/audit.js';

interface Route { path: string; label: string; page: FunctionComponent<{ arg?: string }> }

/** ROUTES: the pages in the navigation's order. */
const ROUTES: Route[] = [
  { path: 'machines', label: 'Machines', page: MachinesPage },
  { path: 'users', label: 'Users', page: UsersPage },
  { path: 'keys', label: 'Keys', page: KeysPage },
  { path: 'policy', label: 'Access policy', page: PolicyPage },
  { path: 'dns', label: 'DNS', page: DnsPage },
  { path: 'audit', label: 'Audit log', page: AuditPage },
  { path: 'about', label: 'About', page: AboutPage },
];

/** current reads the hash: #/machines/3 is the machines page with argument 3. */
function current(): { route: Route; arg?: string } {
  // A page's own query (#/machines?user=alice: its filters) is the page's to read.
  const [path, arg] = location.hash.replace(/^#\/?/, '').split('?')[0]!.split('/');
  return { route: ROUTES.find((r) => r.path === path) ?? ROUTES[0]!, arg: arg ? decodeURIComponent(arg) : undefined };
}

function App(props: { session: SessionInfo }) {
  const [where, setWhere] = useState(current());
  useEffect(() => {
    const onHash = () => {
      setWhere(current());
      // Focus the new page's heading, so keyboard and screen-reader users land on it.
      requestAnimationFrame(() => document.getElementById('page-title')?.focus());
    };
    addEventListener('hashchange', onHash);
    return () => removeEventListener('hashchange', onHash);
  }, []);
  const Page = where.route.page;
  return (
    <>
      {/* The hash names the page, so the skip link moves focus itself instead of following #main. */}
      <a class="skip" href="#main" onClick={(e) => { e.preventDefault(); document.getElementById('main')?.focus(); }}>Skip to content</a>
      <header class="top">
        <span class="brand">Headway</span>
        <nav aria-label="Pages">
          <ul>
            {ROUTES.map((r) => (
              <li key={r.path}><a href={`#/${r.path}`} aria-current={r === where.route ? 'page' : undefined}>{r.label}</a></li>
            ))}
          </ul>
        </nav>
        <form class="signout" method="post" action="/admin/signout">
          <input type="hidden" name="csrf" value={props.session.csrf} />
          <span class="who">{props.session.admin}</span>
          <button type="submit">Sign out</button>
        </form>
      </header>
      <main id="main" tabIndex={-1}>
        <Page key={where.route.path + (where.arg ?? '')} arg={where.arg} />
      </main>
    </>
  );
}

const root = document.getElementById('app')!;
loadSession().then((session) => {
  if (!session) { location.assign('/admin/signin'); return; }
  setCsrf(session.csrf);
  // Preact renders beside what is already there: the "Loading…" placeholder (outside every landmark) goes first.
  root.replaceChildren();
  render(<App session={session} />, root);
}, (err: unknown) => {
  root.textContent = `The console could not start: ${err instanceof Error ? err.message : String(err)}`;
});
