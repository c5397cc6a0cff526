// The SQLite connection's statement cache (cacheStatements) over a real better-sqlite3 database.
import { createRequire } from 'node:module';
import t from 'tap';
import { cacheStatements } from '../src/open.js';

/** The slice of better-sqlite3 used here (the package ships no types; knex loads it the same way). */
interface Statement { run(bindings?: unknown[]): unknown; all(bindings?: unknown[]): unknown[] }
interface Db { prepare(sql: string): Statement; pragma(s: string): unknown; close(): void }
const Database = createRequire(import.meta.url)('better-sqlite3') as new (filename: string) => Db;

t.test('the same SQL gets the statement prepared before, with fresh bindings each run', async (t) => {
  const db = new Database(':memory:');
  t.teardown(() => db.close());
  cacheStatements(db);
  db.prepare('create table kv (k text primary key, v integer)').run();
  const insert = db.prepare('insert into kv (k, v) values (?, ?)');
  t.equal(db.prepare('insert into kv (k, v) values (?, ?)'), insert, 'one statement per SQL text');
  insert.run(['a', 1]);
  db.prepare('insert into kv (k, v) values (?, ?)').run(['b', 2]);
  const select = 'select k, v from kv where v >= ? order by k';
  t.same(db.prepare(select).all([1]), [{ k: 'a', v: 1 }, { k: 'b', v: 2 }]);
  t.same(db.prepare(select).all([2]), [{ k: 'b', v: 2 }], 'bindings are the ones given, not the last run\'s');
  t.not(db.prepare('select k from kv'), db.prepare('select v from kv'), 'other SQL, other statement');
});

t.test('a cached statement still runs after the schema changed under it', async (t) => {
  const db = new Database(':memory:');
  t.teardown(() => db.close());
  cacheStatements(db);
  db.prepare('create table n (id integer primary key, name text)').run();
  db.prepare('insert into n (name) values (?)').run(['x']);
  const read = db.prepare('select * from n');
  t.same(read.all(), [{ id: 1, name: 'x' }]);
  db.prepare('alter table n add column tags text').run();
  t.same(db.prepare('select * from n').all(), [{ id: 1, name: 'x', tags: null }], 'SQLite re-prepares it: the new column shows');
});

t.test('the cache keeps the most recently used statements up to its limit', async (t) => {
  const db = new Database(':memory:');
  t.teardown(() => db.close());
  cacheStatements(db, 3);
  const a = db.prepare('select 1');
  const b = db.prepare('select 2');
  db.prepare('select 3');
  t.equal(db.prepare('select 1'), a, 'a is used again: now the most recent');
  db.prepare('select 4');
  t.not(db.prepare('select 2'), b, 'b was the least recently used and was dropped');
  t.equal(db.prepare('select 1'), a, 'a stayed');
});
