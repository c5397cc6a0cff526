import t from 'tap';
import { OwnText, scanJson, withoutMembers, type JsonScan } from '../src/own-text.js';

const fresh = (): JsonScan => ({ open: [], inString: false, escaped: false, overclosed: false });

t.test('the pieces, their end and their scan are those of the joined text', async (t) => {
  const pieces = ['{"a":[1,', '2],"b', '\\"":"x', '{"}', ' ,  ', '\n', '"c":{"d":['];
  const own = new OwnText();
  let whole = '';
  for (const p of pieces) {
    own.append(p);
    whole += p;
    t.equal(own.tail, whole.slice(-64));
    const st = fresh();
    scanJson(st, whole);
    t.same(own.scan(), st, `scan after ${JSON.stringify(whole)}`);
  }
  t.equal(own.text(), whole);
  t.ok(own.endsWith('['));
});

t.test('trimEnd takes blanks across pieces, then a comma, and the tail follows', async (t) => {
  const own = new OwnText();
  for (const p of ['{"a":1', ',', '  ', '\n', '']) own.append(p);
  own.scan();
  own.trimEnd();
  t.equal(own.text(), '{"a":1,');
  t.ok(own.endsWith(','));
  own.trimEnd(1);
  t.equal(own.text(), '{"a":1');
  t.equal(own.tail, '{"a":1');
  own.append(',"b":2}');
  t.same(own.scan().open, [], 'the pieces after a cut are scanned once');
  t.equal(own.text(), '{"a":1,"b":2}');
});

t.test('a whole string appended as a mark leaves the scan as it was', async (t) => {
  const own = new OwnText();
  own.append('{"a":[');
  const before = { ...own.scan(), open: [...own.scan().open] };
  own.append('"mark"', true);
  t.same(own.scan(), before);
  t.equal(own.text(), '{"a":["mark"');
});

t.test('withoutMembers takes out top-level members by name wherever they are, and nothing else', async (t) => {
  const names = new Set(['PacketFilters', 'PacketFilter']);
  const tricky = { s: 'a "PacketFilters": {[, \\" }', PacketFiltersX: [1, { PacketFilters: 2 }] };
  const objects: Array<Record<string, unknown>> = [
    { PacketFilters: { a: [{ SrcIPs: ['*'] }] } },
    { PacketFilters: {}, Domain: 'x', ...tricky },
    { Domain: 'x', PacketFilters: { 'b,}': [] }, ControlTime: 't' },
    { ...tricky, PacketFilter: [], PacketFilters: { c: null } },
  ];
  for (const o of objects) {
    for (const text of [JSON.stringify(o), JSON.stringify(o, null, 2)]) {
      const cut = withoutMembers(text, names);
      const rest = Object.fromEntries(Object.entries(o).filter(([k]) => !names.has(k)));
      t.same(JSON.parse(cut!.text), rest, text);
      t.same(cut!.dropped.map((d) => JSON.parse(`{${d}}`) as unknown), Object.entries(o).filter(([k]) => names.has(k)).map(([k, v]) => ({ [k]: v })));
    }
  }
  t.equal(withoutMembers(JSON.stringify(tricky), names), undefined, 'none of the names: nothing to do');
  t.equal(withoutMembers('[{"PacketFilters":1}]', names), undefined, 'not an object');
  t.equal(withoutMembers('{"PacketFilters":[1}', names), undefined, 'not JSON');
});
