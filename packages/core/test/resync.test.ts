// ClusterSync over a real in-memory SQLite database shared by two States, as two cluster
// instances share one database: what one writes, the other reads and applies once.
import t from 'tap';
import { createLogger, HeadwayError, State, type Change, type StoragePort } from '../src/index.js';
import { changeTypes as types, nodeInput, startState, type TestState } from '@headway/test-support';

const code = (c: string) => ({ constructor: HeadwayError, code: c });

/** otherInstance is a second State over the same database, standing for another cluster instance. */
async function otherInstance(s: TestState): Promise<State> {
  const other = new State(s.storage, s.config, createLogger({ level: 'error', write: () => undefined }));
  await other.init();
  return other;
}

/** remoteFlags records, for each change published, whether it was marked as another instance's. */
function remoteFlags(s: TestState): boolean[] {
  const out: boolean[] = [];
  s.state.bus.subscribe(() => out.push(s.state.bus.applyingRemote));
  return out;
}

// A write in flight when its node is deleted (a session's last-seen update, a cluster reload reading the row)
// resolves after the deletion; were it to put the node back into memory, every later full map would show it.
t.test('a write or reload in flight across a deletion does not bring the deleted node back', async (t) => {
  let hold: Promise<void> | undefined;
  let reached: (() => void) | undefined;
  const wrap = (real: StoragePort) => ({
    ...real,
    nodes: new Proxy(real.nodes, {
      get: (target, prop) => {
        const v = Reflect.get(target, prop) as unknown;
        if (typeof v !== 'function') return v;
        return async (...args: unknown[]) => {
          const gate = prop === 'update' || prop === 'get' ? hold : undefined;
          const out = await (v as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          // The held call has done its database work; its answer arrives only once the test lets it.
          if (gate) { reached?.(); await gate; }
          return out;
        };
      },
    }),
  });
  const s = await startState(t, {}, wrap);
  const u = await s.state.users.create({ name: 'ivy' });

  for (const kind of ['updateNode', 'reloadNodes', 'reloadNodePatch'] as const) {
    const n = await s.state.nodes.create(nodeInput(`box-${kind.toLowerCase()}`, u.id));
    s.changes.length = 0;
    let release!: () => void;
    hold = new Promise((r) => { release = r; });
    const atGate = new Promise<void>((r) => { reached = r; });
    const inFlight: Promise<unknown> = kind === 'updateNode' ? s.state.nodes.update(n.id, { lastSeen: new Date() }, 'silent')
      : kind === 'reloadNodes' ? s.state.cluster.reloadNodes([n.id])
        : s.state.cluster.reloadNodePatch(n.id, { endpoints: ['192.0.2.1:41641'] });
    await atGate;
    hold = undefined;
    await s.state.nodes.delete(n.id);
    release();
    if (kind === 'updateNode') await t.rejects(inFlight, code('not_found'), 'the update reports the node gone');
    else await inFlight;
    t.notOk(s.state.nodes.get(n.id), `${kind}: the deleted node stays out of memory`);
    t.notOk(s.state.nodes.byNodeKey(n.nodeKey), `${kind}: and out of the key index`);
    t.notOk(s.state.nodes.list().some((x) => x.id === n.id), `${kind}: and out of the node list`);
    t.same(types(s.changes), ['node-removed'], `${kind}: only the removal is published`);
  }
});

t.test('reloadNodes applies another instance\'s add, change and removal, each published once as remote', async (t) => {
  const s = await startState(t);
  const other = await otherInstance(s);
  const u = await other.users.create({ name: 'amy' });
  await s.state.cluster.reloadUsers([u.id]);
  const flags = remoteFlags(s);
  s.changes.length = 0;

  const n = await other.nodes.create(nodeInput('far', u.id));
  await s.state.cluster.reloadNodes([n.id]);
  t.same(s.state.nodes.get(n.id), n, 'added as stored');
  t.equal(s.state.nodes.byNodeKey(n.nodeKey)?.id, n.id, 'and indexed');
  await s.state.cluster.reloadNodes([n.id]);
  t.same(types(s.changes), ['node-added'], 'an unchanged row publishes nothing');

  await other.nodes.rename(n.id, 'near');
  await s.state.cluster.reloadNodes([n.id]);
  t.equal(s.state.nodes.get(n.id)?.givenName, 'near', 'changed');
  // Were the old name still counted in the name index, this rename would be refused as taken.
  await s.state.nodes.rename(n.id, 'far');
  t.same(types(s.changes), ['node-added', 'node-changed', 'node-changed'], 'published once as changed (then the local rename)');
  t.equal(s.state.nodes.get(n.id)?.givenName, 'far', 'the old name is free: the name index follows');
  s.changes.length = 0;
  flags.length = 0;

  await other.nodes.delete(n.id);
  await s.state.cluster.reloadNodes([n.id]);
  t.notOk(s.state.nodes.get(n.id), 'removed');
  t.same(types(s.changes), ['node-removed']);
  t.same(flags, [true], 'marked as another instance\'s change');
  t.equal((await s.state.nodes.create(nodeInput('far', u.id))).givenName, 'far', 'its name is free');
});

t.test('reloadNodePatch applies another instance\'s patch and publishes it as a patch', async (t) => {
  const s = await startState(t);
  const other = await otherInstance(s);
  const u = await s.state.users.create({ name: 'bo' });
  await other.cluster.reloadUsers([u.id]);
  const n = await s.state.nodes.create(nodeInput('pc', u.id));
  await other.cluster.reloadNodes([n.id]);
  const flags = remoteFlags(s);
  s.changes.length = 0;

  await other.nodes.update(n.id, { endpoints: ['192.0.2.1:41641'] }, 'silent');
  await s.state.cluster.reloadNodePatch(n.id, { endpoints: ['192.0.2.1:41641'] });
  t.same(s.state.nodes.require(n.id).endpoints, ['192.0.2.1:41641'], 'memory holds the stored row');
  t.same(s.changes, [{ type: 'node-patch', nodeId: n.id, patch: { endpoints: ['192.0.2.1:41641'] } }]);
  t.same(flags, [true]);

  const fresh = await other.nodes.create(nodeInput('new', u.id));
  await s.state.cluster.reloadNodePatch(fresh.id, { endpoints: [] });
  t.equal(s.changes.at(-1)?.type, 'node-added', 'a patch of a node not known here adds it');
  await other.nodes.delete(fresh.id);
  await s.state.cluster.reloadNodePatch(fresh.id, { endpoints: [] });
  t.equal(s.changes.at(-1)?.type, 'node-removed', 'a patch of a node gone from storage removes it');
});

t.test('reloadUsers applies another instance\'s user changes and removals', async (t) => {
  const s = await startState(t);
  const other = await otherInstance(s);
  const v0 = s.state.users.version;
  const u = await other.users.create({ name: 'cal' });
  await s.state.cluster.reloadUsers([u.id]);
  t.same(s.state.users.get(u.id), u);
  t.ok(s.state.users.version > v0, 'the users version moves');
  await s.state.cluster.reloadUsers([u.id]);
  t.same(types(s.changes), ['user-changed'], 'an unchanged user publishes nothing');
  await other.users.rename(u.id, 'calvin');
  await s.state.cluster.reloadUsers([u.id]);
  t.equal(s.state.users.byName('calvin')?.id, u.id);
  await other.users.delete(u.id);
  await s.state.cluster.reloadUsers([u.id]);
  t.notOk(s.state.users.get(u.id));
  t.same(types(s.changes), ['user-changed', 'user-changed', 'user-removed']);
});

t.test('resync applies everything that differs: users first, deletions last, sessions from the records', async (t) => {
  const s = await startState(t);
  const gone = await s.state.users.create({ name: 'dan' });
  const stays = await s.state.users.create({ name: 'eve' });
  const old = await s.state.nodes.create(nodeInput('old', gone.id));
  const other = await otherInstance(s);
  // Announcements missed while the change feed was down:
  await other.nodes.delete(old.id);
  await other.users.delete(gone.id);
  const fresh = await other.users.create({ name: 'fay' });
  const added = await other.nodes.create(nodeInput('new', fresh.id));
  await other.nodes.rename((await other.nodes.create(nodeInput('x', stays.id))).id, 'y');
  s.changes.length = 0;

  await s.state.cluster.resync([{ instanceId: 'peer', nodeId: added.id }, { instanceId: 'me', nodeId: old.id }], 'me');
  t.same(types(s.changes), ['user-changed', 'node-added', 'node-added', 'node-removed', 'user-removed', 'node-patch']);
  t.same(s.state.users.list().map((u) => u.name), ['eve', 'fay']);
  t.same(s.state.nodes.list().map((n) => n.givenName), ['new', 'y']);
  t.equal(s.state.presence.isOnline(added.id), true, 'the session another instance records');
  await s.state.cluster.resync();
  t.equal(s.changes.length, 6, 'a second resync finds nothing to change');
});

t.test('findStoredNode and findStoredMachine read the database only while clustered', async (t) => {
  const s = await startState(t);
  const other = await otherInstance(s);
  const u = await s.state.users.create({ name: 'gus' });
  await other.cluster.reloadUsers([u.id]);
  const n = await other.nodes.create(nodeInput('elsewhere', u.id));
  t.equal(await s.state.cluster.findStoredNode(n.nodeKey), undefined, 'alone, memory is the whole truth');
  t.equal(await s.state.cluster.findStoredMachine(n.machineKey), undefined);
  s.state.cluster.clustered = true;
  t.equal((await s.state.cluster.findStoredNode(n.nodeKey))?.id, n.id, 'clustered, a key memory does not know is looked up');
  t.equal(s.state.nodes.byNodeKey(n.nodeKey)?.id, n.id, 'and the row applied');
  t.same(types(s.changes), ['user-changed', 'node-added']);
  const m = await other.nodes.create(nodeInput('machine', u.id));
  t.equal((await s.state.cluster.findStoredMachine(m.machineKey))?.id, m.id);
  t.equal(await s.state.cluster.findStoredNode('nodekey:unknown'), undefined);
});
