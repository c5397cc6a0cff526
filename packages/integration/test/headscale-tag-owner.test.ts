/**
 * A tagged node has no user, side by side with the real headscale v0.29.2: the same
 * CLI steps (a user's node, tagged, untag refused, its user deleted) on both servers,
 * comparing the JSON each prints: a node list shows the tagged-devices owner, the tag
 * answer shows none, the user's own list no longer holds the node, and the node
 * survives the deletion of the user who registered it.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { HeadscaleServer, requireHeadscale } from '../src/headscale-server.js';
import { runHeadwayOn } from '../src/cli.js';
import { startTestServer } from '../src/server.js';

t.setTimeout(180_000);

const POLICY = { tagOwners: { 'tag:web': ['alice@'] }, acls: [{ action: 'accept', src: ['*'], dst: ['*:*'] }] };

/** Step is what one server printed for one command: exit status and the JSON (or the error text). */
interface Step { ok: boolean; json?: any; text: string }

/** owner is what a comparison looks at in a node's user: headscale prints ids as numbers, Headway as strings. */
const owner = (n: any) => (n?.user ? { id: Number(n.user.id), name: n.user.name, display_name: n.user.display_name ?? '' } : null);
const nodes = (s: Step) => (Array.isArray(s.json) ? s.json : s.json === null ? [] : s.json?.nodes ?? []) as any[];

const bin = requireHeadscale(t);
if (bin) {
  t.test('tag a user\'s node, try to untag it, delete the user: headscale 0.29.2 and Headway answer alike', async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'hs-tag-owner-'));
    const policyFile = join(dir, 'policy.json');
    writeFileSync(policyFile, JSON.stringify(POLICY));
    const hs = await HeadscaleServer.start(bin, dir);
    t.teardown(async () => { await hs.stop(); rmSync(dir, { recursive: true, force: true }); });
    const hw = await startTestServer({ policy: { mode: 'database' } });
    t.teardown(() => hw.stop());

    const onHeadscale = async (args: string[]): Promise<Step> => {
      try {
        const out = await hs.cli(args);
        try { return { ok: true, json: JSON.parse(out), text: out }; } catch { return { ok: true, text: out }; }
      } catch (err) {
        return { ok: false, text: (err as Error).message };
      }
    };
    const onHeadway = async (args: string[]): Promise<Step> => {
      const r = await runHeadwayOn(hw, args);
      if (r.code !== 0) return { ok: false, text: r.stderr + r.stdout };
      try { return { ok: true, json: JSON.parse(r.stdout), text: r.stdout }; } catch { return { ok: true, text: r.stdout }; }
    };
    const both = async (args: string[]) => ({ hs: await onHeadscale(args), hw: await onHeadway(args) });

    // Set-up: a policy with tag:web, alice, and a node of hers.
    for (const step of [['policy', 'set', '-f', policyFile], ['users', 'create', 'alice', '-o', 'json']]) {
      const r = await both(step);
      t.ok(r.hs.ok && r.hw.ok, `${step.join(' ')}: ${r.hs.text} ${r.hw.text}`);
    }
    const authId = 'hskey-authreq-' + 'abcdefghijklmnopqrstuvwx';
    t.ok((await onHeadscale(['debug', 'create-node', '--user', 'alice', '--name', 'laptop', '--key', authId])).ok);
    const hsNode = await onHeadscale(['auth', 'register', '--auth-id', authId, '--user', 'alice', '-o', 'json']);
    const hwNode = await onHeadway(['debug', 'create-node', '--user', 'alice', '--name', 'laptop', '-o', 'json']);
    t.equal(owner(hsNode.json)?.name, 'alice', hsNode.text);
    t.equal(owner(hwNode.json)?.name, 'alice', hwNode.text);
    const hsId = String(hsNode.json.id), hwId = String(hwNode.json.id);

    // Tagging: the answer for the node has no user on either.
    const tagged = { hs: await onHeadscale(['nodes', 'tag', '-i', hsId, '-t', 'tag:web', '-o', 'json']), hw: await onHeadway(['nodes', 'tag', '-i', hwId, '-t', 'tag:web', '-o', 'json']) };
    t.same([tagged.hs.json?.tags, owner(tagged.hs.json)], [['tag:web'], null], `headscale: ${tagged.hs.text}`);
    t.same([tagged.hw.json?.tags, owner(tagged.hw.json)], [tagged.hs.json?.tags, owner(tagged.hs.json)], 'nodes tag: same tags, no user');

    // A node list shows the tagged-devices owner; alice's list no longer has the node.
    const listed = await both(['nodes', 'list', '-o', 'json']);
    t.same(owner(nodes(listed.hs)[0]), { id: 2147455555, name: 'tagged-devices', display_name: 'Tagged Devices' }, `headscale: ${listed.hs.text}`);
    t.same(nodes(listed.hw).map(owner), nodes(listed.hs).map(owner), 'nodes list: the same owner');
    const mine = await both(['nodes', 'list', '--user', 'alice', '-o', 'json']);
    t.same([nodes(mine.hs).length, nodes(mine.hw).length], [0, 0], 'nodes list --user alice: empty on both');

    // Removing every tag is refused on both, and the node stays tagged.
    for (const args of [['-t', ''], []]) {
      const hsU = await onHeadscale(['nodes', 'tag', '-i', hsId, ...args, '-o', 'json']);
      const hwU = await onHeadway(['nodes', 'tag', '-i', hwId, ...args, '-o', 'json']);
      t.same([hsU.ok, hwU.ok], [false, false], `nodes tag ${args.join(' ')}: refused on both`);
      t.match(hsU.text, /cannot remove all tags from a node/);
      t.match(hwU.text, args.length ? /cannot remove all tags from a node/ : /keeps at least one tag/);
    }
    const still = await both(['nodes', 'list', '-o', 'json']);
    t.same(nodes(still.hw).map((n) => n.tags), nodes(still.hs).map((n) => n.tags), 'still tagged on both');

    // The user who registered it can go; the tagged node stays.
    const gone = await both(['users', 'destroy', '--name', 'alice', '--force']);
    t.same([gone.hs.ok, gone.hw.ok], [true, true], `users destroy: ${gone.hs.text} ${gone.hw.text}`);
    const after = await both(['nodes', 'list', '-o', 'json']);
    t.same([nodes(after.hs).length, nodes(after.hw).length], [1, 1], 'the tagged node outlives the user on both');
  });
}
