import t from 'tap';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { H2Session, type H2Stream } from '../src/h2.js';
import { transportOf } from './h2-transport.js';

// The control server's own HTTP/2 (h2.ts, hpack.ts) against h2spec, the HTTP/2 conformance suite
// (built by .ci/install-h2spec.sh), over plain TCP: one assertion per h2spec case.

/** H2SPEC_VERSION is the release the test runs (the one .ci/install-h2spec.sh builds). */
const H2SPEC_VERSION = 'v2.2.1';
/** CASE_TIMEOUT_S is h2spec's wait for an expected frame or close (its default is 2 s; the CI machine is shared). */
const CASE_TIMEOUT_S = 3;

/**
 * SKIP holds the h2spec cases that do not apply to this server, by h2spec's own case id (what
 * `h2spec <id>` runs alone), each with why. Every other case must pass: one h2spec skipped on its own
 * (it does that when the response has too few bytes for the case) fails here. None is needed today:
 * without -t h2spec runs no TLS case, and its one PUSH_PROMISE case (8.2/1) checks that a server refuses
 * one from a client, which applies.
 */
const SKIP: Readonly<Record<string, string>> = {};

/** h2specBinary is `${H2SPEC_HOME:-~/.cache/headway/h2spec}/<version>/h2spec`. */
function h2specBinary(): string {
  const home = process.env.H2SPEC_HOME || join(homedir(), '.cache', 'headway', 'h2spec');
  return join(home, H2SPEC_VERSION, 'h2spec');
}

/** RESPONSE is sent for every request: long enough for h2spec's flow-control cases (they need 5 bytes or more). */
const RESPONSE = JSON.stringify({ ok: true, note: 'h2spec against the control server HTTP/2' });

/** answer replies the way the control server does: the whole request body first, then a 200 with a JSON body. */
function answer(s: H2Stream): void {
  s.body().then((body) => {
    s.respond(200, 'application/json');
    s.end(`${RESPONSE.slice(0, -1)},"received":${body.length}}`);
  }, (err: Error & { status?: number }) => s.reply(err.status ?? 400, err.message));
}

interface H2specCase {
  /** id is h2spec's case id: spec/section/number, as in `http2/6.9.2/2`. */
  id: string;
  section: string;
  desc: string;
  outcome: 'passed' | 'failed' | 'skipped';
  /** expected and actual are what h2spec reported for a failure: the frames (or close) it would accept, and what came. */
  expected: string[];
  actual: string;
}

function unescapeXml(s: string): string {
  return s.replace(/&(#x[0-9a-f]+|#[0-9]+|amp|lt|gt|quot|apos);/gi, (_, e: string) => {
    if (e[0] === '#') return String.fromCodePoint(e[1] === 'x' || e[1] === 'X' ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10));
    return ({ amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" } as Record<string, string>)[e.toLowerCase()]!;
  });
}

function attributes(tag: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of tag.matchAll(/([\w:-]+)="([^"]*)"/g)) out[m[1]!] = unescapeXml(m[2]!);
  return out;
}

/**
 * failureText splits h2spec's text for a failed case. A <failure> says `Expect:\n...\nActual:\n...`; an
 * <error> (where h2spec 2.2.1 puts every failed case, as its reporter matches the error type by value, not
 * pointer) holds the expected lines, then the actual one last.
 */
function failureText(text: string): { expected: string[]; actual: string } {
  const lines = text.trim().split('\n').filter((l) => l && l !== 'Expect:');
  const at = lines.indexOf('Actual:');
  if (at >= 0) return { expected: lines.slice(0, at), actual: lines.slice(at + 1).join('\n') };
  return { expected: lines.slice(0, -1), actual: lines[lines.length - 1] ?? '' };
}

/**
 * parseJUnit reads h2spec's JUnit report. It is matched rather than parsed as XML: h2spec writes a
 * failure's text into the element unescaped. A suite lists its cases in run order, so a case's place
 * in it is its number in h2spec's id.
 */
function parseJUnit(xml: string): H2specCase[] {
  const cases: H2specCase[] = [];
  for (const suite of xml.matchAll(/<testsuite\b([^>]*)>([\s\S]*?)<\/testsuite>/g)) {
    const s = attributes(suite[1]!);
    let seq = 0;
    for (const tc of suite[2]!.matchAll(/<testcase\b([^>]*)>([\s\S]*?)<\/testcase>/g)) {
      seq++;
      const a = attributes(tc[1]!);
      const inner = tc[2]!;
      const bad = inner.match(/<(failure|error)\b[^>]*>([\s\S]*?)<\/\1>/);
      cases.push({
        id: `${a.package ?? s.package}/${seq}`,
        section: s.name ?? '',
        desc: a.classname ?? '',
        outcome: bad ? 'failed' : /<skipped\b/.test(inner) ? 'skipped' : 'passed',
        ...failureText(bad?.[2] ?? ''),
      });
    }
  }
  return cases;
}

t.test('h2spec: every HTTP/2 conformance case passes against the control server HTTP/2', async (t) => {
  const bin = h2specBinary();
  let runnable = false;
  try { runnable = (statSync(bin).mode & 0o111) !== 0; } catch { /* missing: reported below */ }
  if (!runnable) {
    const reason = `no h2spec ${H2SPEC_VERSION} at ${bin}; run .ci/install-h2spec.sh`;
    if (process.env.CI === 'true') { t.fail(reason); return; }
    t.comment(reason);
    t.skip(reason, () => undefined);
    return;
  }

  let requests = 0;
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    socket.on('error', () => undefined);
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    new H2Session(transportOf(socket), { onStream: (s) => { requests++; answer(s); } });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const dir = mkdtempSync(join(tmpdir(), 'headway-h2spec-'));
  t.teardown(() => { server.close(); for (const s of sockets) s.destroy(); rmSync(dir, { recursive: true, force: true }); });
  const port = (server.address() as AddressInfo).port;
  const report = join(dir, 'junit.xml');

  // No -t (TLS) and no -S (strict cases): the control protocol runs HTTP/2 in the clear inside Noise.
  const child = spawn(bin, ['-h', '127.0.0.1', '-p', String(port), '-o', String(CASE_TIMEOUT_S), '-j', report], { stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(() => { child.kill(); });
  let output = '';
  child.stdout.on('data', (d: Buffer) => { output += d.toString(); });
  child.stderr.on('data', (d: Buffer) => { output += d.toString(); });
  const code = await new Promise<number | null>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', resolve);
  });

  let xml: string;
  try { xml = readFileSync(report, 'utf8'); } catch {
    // h2spec writes its report only once every case has run: it stopped early (it cannot connect, say).
    t.fail(`h2spec exited ${code} without a report`, { output: output.slice(-4000) });
    return;
  }
  const cases = parseJUnit(xml);
  const summary = output.match(/(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed/);
  t.ok(summary, 'h2spec printed its summary', { output: output.slice(-2000) });
  t.equal(cases.length, Number(summary?.[1]), 'the report lists every case h2spec counted');
  t.ok(requests > 0, 'h2spec reached this server');

  for (const c of cases) {
    const name = `${c.id} ${c.section}: ${c.desc}`;
    const why = SKIP[c.id];
    if (why) { t.pass(name, { skip: why }); continue; }
    if (c.outcome === 'skipped') { t.fail(`${name} (h2spec skipped it)`); continue; }
    t.ok(c.outcome === 'passed', name, c.outcome === 'failed' ? { expected: c.expected.join(' | '), actual: c.actual } : {});
  }
  const ids = new Set(cases.map((c) => c.id));
  for (const id of Object.keys(SKIP)) t.ok(ids.has(id), `SKIP names ${id}, a case h2spec ${H2SPEC_VERSION} has`);
  t.equal(code, cases.some((c) => c.outcome === 'failed') ? 1 : 0, 'h2spec exits 1 exactly when a case failed');
});
