import { readFileSync } from 'node:fs';
import t from 'tap';
import {
  expectedPeerIndexes, groupOf, GROUP_TAGS, medianRound, parseHeadscaleBenchOptions, parseStatTicks, parseStatusRss, sizeTable,
  type RenameRound, type ServerFigures,
} from '../src/bench-headscale-parts.js';

t.test('options: defaults, both spellings of a value, and refusals', async (t) => {
  t.same(parseHeadscaleBenchOptions([]), { sizes: [0, 100, 300], rounds: 3, joinTimeoutSeconds: 300, renameTimeoutSeconds: 60, servers: ['headway', 'headscale'] });
  const o = parseHeadscaleBenchOptions(['--sizes', '0, 5,', '--rounds=1', '--rename-timeout', '9', '--join-timeout=30', '--servers', 'headscale,headscale']);
  t.same(o, { sizes: [0, 5], rounds: 1, joinTimeoutSeconds: 30, renameTimeoutSeconds: 9, servers: ['headscale'] });
  t.throws(() => parseHeadscaleBenchOptions(['--sizes', '5,-1']), /--sizes: "-1" is not an integer >= 0/);
  t.throws(() => parseHeadscaleBenchOptions(['--sizes', 'x']), /--sizes: "x"/);
  t.throws(() => parseHeadscaleBenchOptions(['--sizes', ',']), /empty list/);
  t.throws(() => parseHeadscaleBenchOptions(['--rounds', '0']), /--rounds: "0" is not an integer >= 1/);
  t.throws(() => parseHeadscaleBenchOptions(['--rounds']), /--rounds.*argument missing/);
  t.throws(() => parseHeadscaleBenchOptions(['--servers', 'tailscale']), /"tailscale" is not headway or headscale/);
  t.throws(() => parseHeadscaleBenchOptions(['--workers', '2']), /Unknown option '--workers'.*usage:/);
  t.throws(() => parseHeadscaleBenchOptions(['100']), /Unexpected argument '100'/);
});

t.test('/proc/<pid>/status: VmRSS and VmHWM in bytes; a missing line is an error', async (t) => {
  const status = 'Name:\tnode\nVmPeak:\t 1000 kB\nVmHWM:\t  150000 kB\nVmRSS:\t  120000 kB\nRssAnon:\t 90000 kB\n';
  t.same(parseStatusRss(status), { rss: 120000 * 1024, hwm: 150000 * 1024 });
  t.throws(() => parseStatusRss('Name:\tnode\nVmHWM:\t 1 kB\n'), /no VmRSS line/);
  const own = parseStatusRss(readFileSync('/proc/self/status', 'utf8'));
  t.ok(own.rss > 0 && own.hwm >= own.rss, `this process: rss ${own.rss}, hwm ${own.hwm}`);
});

t.test('/proc/<pid>/stat: utime + stime, counted after the last parenthesis of the command name', async (t) => {
  // Fields 3.. after the name: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
  const rest = 'S 1 1 1 0 -1 4194304 123 0 0 0 250 37 5 6 20 0 1 0';
  t.equal(parseStatTicks(`4242 (headscale) ${rest}`), 287);
  t.equal(parseStatTicks(`4242 (a) b (c d) ${rest}`), 287, 'a name with spaces and parentheses');
  t.throws(() => parseStatTicks('4242 headscale S 1'), /no command name/);
  t.throws(() => parseStatTicks('4242 (x) S 1 1'), /not numbers/);
});

t.test('the four groups: g0 sees every device, g1 only g0 and g1, g2 and g3 each other and g0; visibility is mutual', async (t) => {
  const n = 12;
  t.same(Array.from({ length: 5 }, (_, i) => GROUP_TAGS[groupOf(i)]), ['tag:g0', 'tag:g1', 'tag:g2', 'tag:g3', 'tag:g0']);
  t.same(expectedPeerIndexes(0, n), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
  t.same(expectedPeerIndexes(1, n), [0, 4, 5, 8, 9]);
  t.same(expectedPeerIndexes(2, n), [0, 3, 4, 6, 7, 8, 10, 11]);
  t.same(expectedPeerIndexes(7, n), [0, 2, 3, 4, 6, 8, 10, 11]);
  const asymmetric: string[] = [];
  for (let i = 0; i < n; i++) for (const j of expectedPeerIndexes(i, n)) if (!expectedPeerIndexes(j, n).includes(i)) asymmetric.push(`${i}->${j}`);
  t.same(asymmetric, []);
  t.same(expectedPeerIndexes(0, 1), [], 'a lone device has no peers');
});

const round = (reachedMs: number | undefined, extra: Partial<RenameRound> = {}): RenameRound =>
  ({ callMs: 5, reachedMs, reached: reachedMs === undefined ? 3 : 5, devices: 5, serverCpuMs: 10, loadCpuMs: 2, ...extra });

t.test('the median rename round: the middle reaching time, an unreached round counting as the slowest', async (t) => {
  t.equal(medianRound([]), undefined);
  t.equal(medianRound([round(30), round(10), round(20)])?.reachedMs, 20);
  t.equal(medianRound([round(30), round(10)])?.reachedMs, 10, 'the lower of an even count');
  t.equal(medianRound([round(undefined), round(undefined), round(10)])?.reachedMs, undefined);
});

const figures = (extra: Partial<ServerFigures> = {}): ServerFigures => ({
  rssIdle: 100 * 1048576, rssPeak: 150 * 1048576, rssSteady: 120 * 1048576, hwm: 151 * 1048576, joinMs: 2500, joinTimedOut: false, joinFailures: 0, mapStreamsEnded: 0,
  serverCpuJoinMs: 1200, loadCpuJoinMs: 800, renames: [round(40), round(20), round(30, { callMs: 7 })], renameMs: 30, ...extra,
});

t.test('a size\'s table: one column per server in order, unconverged figures in words, a failed server as -', async (t) => {
  const text = sizeTable(5, [
    { name: 'headway', figures: figures() },
    { name: 'headscale', figures: figures({ joinMs: undefined, joinTimedOut: true, mapStreamsEnded: 4, renames: [round(undefined)], rssIdle: 50 * 1048576 }) },
    { name: 'other' },
  ], 60, 300);
  const lines = text.split('\n');
  t.match(lines[0], /^N=5\s+headway\s+headscale\s+other$/);
  t.match(lines[1], /^-+( +-+){3}$/);
  const row = (label: string): string[] => lines.find((l) => l.startsWith(label))!.slice(label.length).trim().split(/\s{2,}/);
  t.same(row('RSS idle, 10 s after start (MiB)'), ['100.0', '50.0', '-']);
  t.same(row('RSS peak, sampled every 0.5 s (MiB)'), ['150.0', '150.0', '-']);
  t.same(row('join until all converged (s)'), ['2.50', 'did not converge within 300s', '-']);
  t.same(row('map streams that ended and were polled again'), ['0', '4', '-']);
  t.same(row('rename reaching every device (ms, median)'), ['30', 'did not converge within 60s (3/5)', '-']);
  t.same(row('rename, every round (ms)'), ['40 20 30', 'timeout', '-']);
  t.same(row('rename API call (ms, median round)'), ['7', '5', '-']);
  t.equal(new Set(lines.map((l) => l.length)).size, 1, 'columns aligned');

  const idle = sizeTable(0, [{ name: 'headway', figures: figures({ renames: [] }) }], 60, 300);
  t.match(idle, /RSS idle/);
  t.notMatch(idle, /steady|converged|CPU|rename/, 'no devices: no join, steady or rename rows');
});
