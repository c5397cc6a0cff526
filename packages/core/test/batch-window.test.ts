// nextBatchWindow: how long the SessionHub collects changes before sending them. A quiet server sends a change
// after the base window; a busy one (a join burst) doubles the window up to its cap, so many joins share one
// message per session instead of one message per join per session.
import t from 'tap';
import { BATCH_WINDOW_MS, MAX_BATCH_WINDOW_MS, nextBatchWindow } from '../src/control/sessions.js';

t.test('a quiet event loop keeps the base window', async (t) => {
  t.equal(nextBatchWindow(BATCH_WINDOW_MS, 0.1, 30), BATCH_WINDOW_MS);
  t.equal(nextBatchWindow(MAX_BATCH_WINDOW_MS, 0.2, 30), BATCH_WINDOW_MS, 'load gone: back to the base window at once');
});

t.test('a busy event loop doubles the window up to the cap', async (t) => {
  const seen: number[] = [];
  let w = BATCH_WINDOW_MS;
  for (let i = 0; i < 8; i++) { w = nextBatchWindow(w, 0.95, 2); seen.push(w); }
  t.same(seen.slice(0, 4), [40, 80, 160, 320]);
  t.ok(seen.every((x) => x <= MAX_BATCH_WINDOW_MS), `never above ${MAX_BATCH_WINDOW_MS} ms`);
  t.equal(seen.at(-1), MAX_BATCH_WINDOW_MS);
});

t.test('a change that did not queue up behind the previous flush starts from the base window, however busy the loop', async (t) => {
  t.equal(nextBatchWindow(MAX_BATCH_WINDOW_MS, 1, 5000), BATCH_WINDOW_MS);
  t.equal(nextBatchWindow(160, 1, BATCH_WINDOW_MS), BATCH_WINDOW_MS, 'a base window after the flush ended: a lone change');
  t.equal(nextBatchWindow(160, 1, 3), 320, 'right behind a flush on a busy loop: longer');
});
