import t from 'tap';
import { readFileSync } from 'node:fs';
import { parseRealisticOptions } from '../src/bench-realistic.js';
import { parseRestarts } from '../src/bench-restart.js';
import { parseStatus } from '../src/bench-idle.js';

t.test('--restart: term and kill in the order given, none for no restart', async (t) => {
  t.same(parseRealisticOptions([], {}).restarts, ['SIGTERM', 'SIGKILL'], 'both by default');
  t.same(parseRealisticOptions(['--restart', 'kill'], {}).restarts, ['SIGKILL']);
  t.same(parseRealisticOptions(['--restart=none'], {}).restarts, []);
  t.same(parseRestarts('SIGKILL, term'), ['SIGKILL', 'SIGTERM']);
  t.throws(() => parseRestarts('term,hup'), /--restart: "hup" is not term, kill or none/);
  t.throws(() => parseRealisticOptions(['--restart'], {}), /--restart needs a value/);
});

t.test('the idle reading splits the resident set into its anonymous and file-backed parts', async (t) => {
  const status = 'Name:\tnode\nVmHWM:\t 150000 kB\nVmRSS:\t 120000 kB\nRssAnon:\t 70000 kB\nRssFile:\t 49000 kB\nRssShmem:\t 1000 kB\n';
  t.same(parseStatus(status), { rss: 120000 * 1024, rssAnon: 70000 * 1024, rssFile: 49000 * 1024 });
  t.throws(() => parseStatus('VmRSS:\t 1 kB\n'), /no RssAnon line/);
  const own = parseStatus(readFileSync('/proc/self/status', 'utf8'));
  t.ok(own.rssAnon > 0 && own.rssFile > 0 && own.rss >= own.rssAnon, 'this process reads sensibly');
});
