/**
 * Test-only helpers around a real OpenID Connect provider (oidc-provider) that runs
 * as its own process (bin/provider.mjs) on 127.0.0.1 with an ephemeral port, and a
 * small browser (fetch with a cookie jar, redirects followed by hand) that logs a
 * person in through it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export interface TestClient { client_id: string; client_secret: string; redirect_uris: string[] }
export interface TestAccount { login: string; password: string; sub: string; claims?: Record<string, unknown> }

export interface ProviderOptions {
  clients: TestClient[];
  accounts: TestAccount[];
  /** pkceRequired makes the provider refuse authorization requests without PKCE. */
  pkceRequired?: boolean;
  /** rogueSigningKey signs ID tokens with a key the provider's published JWKS does not contain. */
  rogueSigningKey?: boolean;
}

export interface RunningProvider {
  issuer: string;
  pid: number;
  /** output is what the provider printed on stderr (errors only). */
  output(): string;
  stop(): Promise<void>;
}

const SCRIPT = fileURLToPath(new URL('../../bin/provider.mjs', import.meta.url));

/** startOidcProvider starts the provider process and resolves with its issuer URL once it listens. */
export async function startOidcProvider(options: ProviderOptions, timeoutMs = 20_000): Promise<RunningProvider> {
  const child: ChildProcess = spawn(process.execPath, [SCRIPT], {
    env: { ...process.env, OIDC_TEST_PROVIDER_CONFIG: JSON.stringify(options) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (c: string) => { stderr = (stderr + c).slice(-20_000); });
  const issuer = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`OIDC test provider did not start within ${timeoutMs} ms: ${stderr}`)); }, timeoutMs);
    child.stdout!.setEncoding('utf8').on('data', (c: string) => {
      out += c;
      const line = out.split('\n')[0];
      if (out.includes('\n')) {
        clearTimeout(timer);
        try { resolve((JSON.parse(line!) as { issuer: string }).issuer); } catch { reject(new Error(`OIDC test provider printed ${line}`)); }
      }
    });
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`OIDC test provider exited with ${code}: ${stderr}`)); });
  });
  return {
    issuer,
    pid: child.pid!,
    output: () => stderr,
    stop: () => new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once('exit', () => resolve());
      child.kill('SIGTERM');
      setTimeout(() => child.kill('SIGKILL'), 3000).unref();
    }),
  };
}

export interface Page { url: string; status: number; body: string; headers: Headers }

/**
 * Browser is fetch with a cookie jar per origin, following redirects one by one so
 * a test can see (and change) each hop.
 */
export class Browser {
  private readonly jar = new Map<string, Map<string, string>>();
  /** visited lists every URL requested, in order. */
  readonly visited: string[] = [];

  private cookiesFor(url: URL): string {
    const jar = this.jar.get(url.origin);
    return jar ? [...jar].map(([k, v]) => `${k}=${v}`).join('; ') : '';
  }

  private store(url: URL, headers: Headers): void {
    const jar = this.jar.get(url.origin) ?? this.jar.set(url.origin, new Map()).get(url.origin)!;
    for (const line of headers.getSetCookie()) {
      const [pair, ...attrs] = line.split(';');
      const i = pair!.indexOf('=');
      const name = pair!.slice(0, i).trim();
      const value = pair!.slice(i + 1).trim();
      const gone = attrs.some((a) => /^\s*max-age=0\s*$/i.test(a) || /^\s*expires=Thu, 01 Jan 1970/i.test(a));
      if (gone || value === '') jar.delete(name); else jar.set(name, value);
    }
  }

  /** request sends one request without following redirects. */
  async request(url: string, init: { method?: string; form?: Record<string, string> } = {}): Promise<Page> {
    const u = new URL(url);
    this.visited.push(url);
    const headers: Record<string, string> = {};
    const cookie = this.cookiesFor(u);
    if (cookie) headers.cookie = cookie;
    let body: string | undefined;
    if (init.form) { headers['content-type'] = 'application/x-www-form-urlencoded'; body = new URLSearchParams(init.form).toString(); }
    const res = await fetch(u, { method: init.method ?? (body ? 'POST' : 'GET'), headers, body, redirect: 'manual' });
    this.store(u, res.headers);
    return { url, status: res.status, body: await res.text(), headers: res.headers };
  }

  /**
   * follow requests `url` and follows redirects until a page answers; `rewrite` may
   * change a redirect target before it is followed (to tamper with a parameter).
   */
  async follow(url: string, init: { method?: string; form?: Record<string, string> } = {}, rewrite?: (next: URL) => URL): Promise<Page> {
    let page = await this.request(url, init);
    for (let hops = 0; page.status >= 300 && page.status < 400; hops++) {
      if (hops > 20) throw new Error(`too many redirects from ${url}`);
      let next = new URL(page.headers.get('location')!, page.url);
      if (rewrite) next = rewrite(next);
      page = await this.request(next.href);
    }
    return page;
  }
}

/** describePage names a page in a test message: its status and title (or its first characters). */
export function describePage(page: Page): string {
  const title = /<title>([^<]*)<\/title>/i.exec(page.body)?.[1];
  const refusal = /<h1>Login refused<\/h1>\s*<p>([^<]*)</i.exec(page.body)?.[1];
  return `${page.status} ${title ?? page.body.slice(0, 120)}${refusal ? `: ${refusal}` : ''}`;
}

/** formAction reads the action and hidden fields of the first form on a page. */
export function readForm(page: Page): { action: string; fields: Record<string, string> } {
  const form = /<form[^>]*action="([^"]*)"[^>]*>([\s\S]*?)<\/form>/i.exec(page.body);
  if (!form) throw new Error(`no form on ${page.url} (${page.status}): ${page.body.slice(0, 300)}`);
  const fields: Record<string, string> = {};
  for (const m of form[2]!.matchAll(/<input([^>]*)>/gi)) {
    const name = /\bname="([^"]+)"/.exec(m[1]!)?.[1];
    if (name) fields[name] = unescapeHtml(/\bvalue="([^"]*)"/.exec(m[1]!)?.[1] ?? '');
  }
  return { action: new URL(unescapeHtml(form[1]!), page.url).href, fields };
}

function unescapeHtml(s: string): string {
  return s.replace(/&#(\d+);/g, (_, n: string) => String.fromCharCode(Number(n))).replace(/&amp;/g, '&').replace(/&quot;/g, '"').replace(/&lt;/g, '<').replace(/&gt;/g, '>');
}

export interface LoginResult {
  /** page is where the login ended: Headway's confirmation page, or a refusal. */
  page: Page;
  browser: Browser;
}

/**
 * signIn opens a device's AuthURL, signs in at the provider's form as `login`, and
 * stops on the page Headway shows after the callback (the confirmation or a refusal).
 */
export async function signIn(authUrl: string, login: string, password: string, opts: { browser?: Browser; rewrite?: (next: URL) => URL } = {}): Promise<LoginResult> {
  const browser = opts.browser ?? new Browser();
  const form = await browser.follow(authUrl, {}, opts.rewrite);
  if (form.status !== 200 || !/name="password"/.test(form.body)) return { page: form, browser };
  const { action } = readForm(form);
  const page = await browser.follow(action, { form: { login, password } }, opts.rewrite);
  return { page, browser };
}

/** confirm submits Headway's confirmation form and returns the final page. */
export async function confirm(result: LoginResult): Promise<Page> {
  const { action, fields } = readForm(result.page);
  return result.browser.follow(action, { form: fields });
}
