/**
 * The Access policy page with two administrators and in file mode, in Chromium: both load the policy, the first
 * saves, the second's save is refused as changed by someone else (the server keeps the first's text) until the
 * second reloads; with policy.mode: file the editor is read-only, names the file and offers no save. axe-core
 * finds nothing at phone and desktop widths in either state. The two administrators run on SQLite and PostgreSQL.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { Page } from 'puppeteer-core';
import { serverDatabases, startTestServer } from '../src/server.js';
import { axeViolations, launchChromium, SCREEN_WIDTHS, signIn } from '../src/console.js';
import { editorState, openForAxe, savePolicy, setEditor, textOf, waitText } from '../src/console-devices.js';
import { unmet } from '../src/unmet.js';

t.setTimeout(180_000);

const FIRST = '{ "acls": [{ "action": "accept", "src": ["*"], "dst": ["*:*"] }] }\n';
const ALICE = '// alice\'s change\n{ "acls": [{ "action": "accept", "src": ["alice@"], "dst": ["*:*"] }] }\n';
const BOB = '// bob\'s change\n{ "acls": [{ "action": "accept", "src": ["bob@"], "dst": ["*:*"] }] }\n';

/** loaded waits until the editor holds `text`. */
async function loaded(page: Page, text: string): Promise<void> {
  await page.waitForFunction((want) => (globalThis as unknown as { document: { querySelector(s: string): { value: string } | null } }).document.querySelector('#policy-text')?.value === want, {}, text);
}

async function axeAtWidths(t: Test, page: Page, what: string): Promise<void> {
  for (const width of SCREEN_WIDTHS) {
    await page.setViewport({ width, height: 900 });
    t.same(await axeViolations(page), [], `no axe-core violations at ${width} px (${what})`);
  }
  await page.setViewport({ width: 1280, height: 800 });
}

const STALE = "a second administrator's stale save is refused, the first's text stays, and a reload lets the second save";
t.test(STALE, (t) => staleSave(t, undefined));
for (const db of serverDatabases(t, "the console's versioned policy save", ['postgres'])) {
  t.test(`${STALE} (${db.name})`, (t) => db.run((database) => staleSave(t, database)));
}

async function staleSave(t: Test, database: Record<string, unknown> | undefined): Promise<void> {
  const browser = await launchChromium();
  if (!browser) return unmet(t, 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)');
  t.teardown(() => browser.close());
  const s = await startTestServer({ policy: { mode: 'database' }, ...(database ? { database } : {}) });
  t.teardown(() => s.stop());
  await s.state.users.create({ name: 'alice' });
  await s.state.users.create({ name: 'bob' });

  const a = await signIn(await browser.createBrowserContext(), s, 'alice');
  const b = await signIn(await browser.createBrowserContext(), s, 'bob');
  await openForAxe(a, 'policy');
  await openForAxe(b, 'policy');
  await waitText(a, '#policy-hint', /No policy is set: every device may reach every device/);
  t.pass('with no policy set, the page says what that means');
  t.equal(await savePolicy(a, FIRST), 'saved', 'the first policy is saved at the version of no policy');
  await b.reload();
  await b.waitForSelector('#policy-text');
  await loaded(b, FIRST);

  t.equal(await savePolicy(a, ALICE), 'saved');
  t.equal(s.policy.policyText, ALICE, "alice's save is in force");

  t.equal(await savePolicy(b, BOB), 'stale', "bob's save is refused");
  t.match(await textOf(b, '.policy-stale'), /changed by someone else since you loaded it/, 'bob is told the policy changed since he loaded it');
  t.equal(s.policy.policyText, ALICE, "the server still holds alice's text");
  t.equal((await editorState(b)).text, BOB, "bob's edits stay in his editor until he reloads");
  await axeAtWidths(t, b, 'stale save');

  await b.click('.policy-stale button');
  await loaded(b, ALICE);
  t.equal(await b.$('.policy-stale'), null, 'the reload clears the refusal');
  t.equal(await savePolicy(b, BOB), 'saved');
  t.equal(s.policy.policyText, BOB, 'after reloading, bob saves');

  // alice now holds a stale version in turn: her next save is refused too.
  t.equal(await savePolicy(a, FIRST), 'stale', "alice's next save is refused");
  t.equal(s.policy.policyText, BOB, "bob's text stays");

  // Check shows the server's warnings for a valid policy, and changes nothing.
  await setEditor(a, '{ "acls": [] }');
  await a.click('.policy-actions button');
  t.match(await waitText(a, '.policy-warnings', /denied/), /empty acls list.*all traffic between devices will be denied/, 'the warning is shown');
  t.match(await textOf(a, '.policy-main p.alert.notice'), /valid/);
  t.equal(s.policy.policyText, BOB, 'checking changes nothing');
}

t.test('file mode: the editor is read-only, names the file, and has no save', async (t) => {
  const browser = await launchChromium();
  if (!browser) return unmet(t, 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)');
  t.teardown(() => browser.close());
  const dir = mkdtempSync(join(tmpdir(), 'hw-console-policy-'));
  const path = join(dir, 'policy.hujson');
  writeFileSync(path, FIRST);
  const s = await startTestServer({ policy: { mode: 'file', path } });
  t.teardown(async () => { await s.stop(); rmSync(dir, { recursive: true, force: true }); });

  const page = await signIn(browser, s, 'reader');
  await openForAxe(page, 'policy');
  await loaded(page, FIRST);
  t.ok(await page.$eval('#policy-text', (e) => (e as unknown as { readOnly: boolean }).readOnly), 'the editor is read-only');
  t.match(await textOf(page, '.policy-readonly'), new RegExp(`Read-only.*${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}.*policy\\.mode: file`), 'the page says why, naming the file');
  t.equal(await page.$('.policy-actions button[type=submit]'), null, 'there is no save button');
  await page.click('.policy-actions button');
  await waitText(page, '.policy-main p.alert.notice', /valid/);
  t.pass('checking still works');
  await axeAtWidths(t, page, 'file mode');
});
