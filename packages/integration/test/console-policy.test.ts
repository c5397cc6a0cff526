/**
 * The console's Access policy page in Chromium with two real tailscaled: a policy saved with an error shows the error
 * at its line and column, and its button puts the caret there and marks the line; a policy whose test fails is
 * refused with the test named, and "Run tests" gives each test's verdict; the preview of a machine says what the
 * server's preview route says and what the device's own network map then holds; the fixed policy, saved, separates
 * the two devices (one is gone from the other's network map). Tab leaves the editor; axe-core finds nothing.
 */
import t, { type Test } from 'tap';
import { serverDatabases } from '../src/server.js';
import type { NetworkMapJson } from '../src/tailscale.js';
import { findTailscaleBinaries } from '../src/tailscale.js';
import { axeViolations, launchChromium, SCREEN_WIDTHS, signIn, socketCall } from '../src/console.js';
import { deviceServer, editorState, openForAxe, savePolicy, setEditor, textOf, waitText } from '../src/console-devices.js';
import { unmet } from '../src/unmet.js';

t.setTimeout(300_000);

const OPEN = '{ "acls": [{ "action": "accept", "src": ["*"], "dst": ["*:*"] }] }\n';

/** BROKEN misses a comma on line 4, column 33 (where "dst" starts). */
const BROKEN = `// alice may no longer reach bob
{
  "acls": [
    { "action": "accept", "src": ["bob@"] "dst": ["bob@:*"] },
  ],
}
`;
/** FAILING is valid, but its test expects alice to reach bob. */
const FAILING = `{
  "acls": [
    { "action": "accept", "src": ["bob@"], "dst": ["bob@:*"] },
  ],
  "tests": [
    { "src": "bob@", "accept": ["bob@:22"] },
    { "src": "alice@", "accept": ["bob@:22"] },
  ],
}
`;
const FIXED = `// alice may no longer reach bob
{
  "acls": [
    { "action": "accept", "src": ["bob@"], "dst": ["bob@:*"] },
  ],
  "tests": [
    { "src": "alice@", "deny": ["bob@:22"] },
  ],
}
`;

const peerNames = (nm: NetworkMapJson) => (nm.Peers ?? []).map((p) => String((p as { Name?: string }).Name ?? '').split('.')[0]!).sort();

const TITLE = 'errors at their line, failing tests refused, preview, and a saved policy separating two real devices';
t.test(TITLE, (t) => policyScenario(t, undefined));
for (const db of serverDatabases(t, 'the console policy page with real devices', ['postgres'])) t.test(`${TITLE} (${db.name})`, (t) => db.run((database) => policyScenario(t, database)));

async function policyScenario(t: Test, database: Record<string, unknown> | undefined): Promise<void> {
  if (findTailscaleBinaries().length === 0) return unmet(t, 'no Tailscale client installed (run .ci/install-tailscale.sh)');
  const browser = await launchChromium();
  if (!browser) return unmet(t, 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)');
  t.teardown(() => browser.close());
  const { s, join } = await deviceServer(t, database);
  await s.policy.set(OPEN);
  const alice = await s.state.users.create({ name: 'alice' });
  const bob = await s.state.users.create({ name: 'bob' });
  const aliceKey = (await s.state.keys.createPreAuthKey({ userId: alice.id })).secret;
  const bobKey = (await s.state.keys.createPreAuthKey({ userId: bob.id })).secret;
  const [aliceDev] = await Promise.all([join('alice-dev', aliceKey), join('bob-dev', bobKey)]);
  await aliceDev.waitNetmap((nm) => peerNames(nm).includes('bob-dev'), { timeoutMs: 30_000 });
  t.pass('before: alice-dev has bob-dev in its network map');

  const page = await signIn(browser, s, 'editor');
  await openForAxe(page, 'policy');
  await page.waitForFunction(() => ((globalThis as unknown as { document: { querySelector(s: string): { value: string } | null } }).document.querySelector('#policy-text')?.value ?? '').includes('acls'));
  t.equal((await editorState(page)).text, OPEN, 'the editor holds the policy in force');

  // Keyboard: Tab leaves the editor for the next control.
  await page.focus('#policy-text');
  await page.keyboard.press('Tab');
  t.equal(await page.evaluate(() => (globalThis as unknown as { document: { activeElement: { textContent: string } } }).document.activeElement.textContent), 'Check', 'Tab moves from the editor to Check');

  // The preview under the open policy matches the server's preview and the device's own map.
  const aliceId = String(s.state.nodes.list().find((n) => n.hostname === 'alice-dev')!.id);
  await page.select('#preview-node', aliceId);
  await page.click('section[aria-labelledby="policy-preview-title"] button[type=submit]');
  await waitText(page, '.preview-result', /alice-dev/);
  const shown = async () => ({
    out: await textOf(page, '.preview-result [aria-labelledby="reach-out"]'),
    in: await textOf(page, '.preview-result [aria-labelledby="reach-in"]'),
  });
  const server = async (policy: string) => (await socketCall(s, 'POST', '/api/v1/policy/preview', { policy, node: aliceId })).json;
  const openServer = await server(OPEN);
  t.same(openServer.canReach.map((e: { name: string }) => e.name), ['bob-dev'], "the server's preview: alice-dev reaches bob-dev");
  t.match((await shown()).out, /bob-dev: any port/, 'the page shows the same: bob-dev, any port');
  t.match((await shown()).in, /bob-dev: any port/, 'and bob-dev reaches alice-dev');

  // An error: shown at its line and column; its button puts the caret there and marks the line.
  t.equal(await savePolicy(page, BROKEN), 'refused');
  const problem = await textOf(page, '.policy-problems');
  t.match(problem, /Line 4, column 43:.*comma/, 'the error is shown at line 4, column 43');
  await page.click('.policy-problems button.problem');
  const at = await editorState(page);
  t.equal(at.marked, 4, 'line 4 is marked');
  t.ok(at.focused, 'the editor has the focus');
  t.equal(at.caret, BROKEN.split('\n').slice(0, 3).join('\n').length + 1 + 42, 'the caret is at line 4, column 43');
  t.equal(s.policy.policyText, OPEN, 'the refused policy changed nothing');
  for (const width of SCREEN_WIDTHS) {
    await page.setViewport({ width, height: 900 });
    t.same(await axeViolations(page), [], `no axe-core violations at ${width} px (errors and preview shown)`);
  }

  // A failing test: Run tests names it; saving is refused with it named, as the server refuses it.
  await setEditor(page, FAILING);
  await page.click('section[aria-labelledby="policy-tests-title"] button');
  await waitText(page, '.policy-tests-summary', /1 of 2 failed/);
  t.match(await textOf(page, 'li[data-test="tests[0]"]'), /^Passed/, 'tests[0] passed');
  t.match(await textOf(page, 'li[data-test="tests[1]"]'), /^Failed tests\[1\] from alice@.*alice@ -> bob@:22 expected accept/, 'tests[1] failed, saying why');
  t.equal(await savePolicy(page, FAILING), 'refused');
  const refused = await textOf(page, '.policy-problems');
  t.match(refused, /tests\[1\]: alice@ -> bob@:22 expected accept/, 'the save is refused naming the failing test');
  const check = await socketCall(s, 'POST', '/api/v1/policy/check', { policy: FAILING });
  t.match(check.json.detail, /tests\[1\]: alice@ -> bob@:22 expected accept/, 'as the server refuses it');
  t.equal(s.policy.policyText, OPEN, 'nothing changed');

  // The fixed policy: the preview says alice-dev reaches nothing; saved, bob-dev leaves alice-dev's map.
  await setEditor(page, FIXED);
  await page.click('section[aria-labelledby="policy-preview-title"] button[type=submit]');
  await waitText(page, '.preview-result [aria-labelledby="reach-out"]', /Nothing/);
  t.same((await server(FIXED)).canReach, [], "the server's preview: alice-dev reaches nothing");
  t.match((await shown()).in, /Nothing may open/, 'and nothing reaches it');
  t.match(await textOf(page, '.preview-result'), /No peers/, 'and it has no peers');
  t.equal(await savePolicy(page, FIXED), 'saved');
  t.equal(s.policy.policyText, FIXED, 'the server holds the fixed policy');
  const after = await aliceDev.waitNetmap((nm) => !peerNames(nm).includes('bob-dev'), { timeoutMs: 30_000 });
  t.same(peerNames(after), [], "after: bob-dev is gone from alice-dev's network map, as the preview said");
  const audit = await socketCall(s, 'GET', '/api/v1/audit?limit=5');
  t.ok(audit.json.entries.some((e: { actor: string; action: string }) => e.actor === 'console:editor' && e.action === 'setPolicy'), 'the save is in the audit log as console:editor');
}
