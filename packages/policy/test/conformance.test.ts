import t from 'tap';
import { CATEGORIES, compareCase, conformanceDir, loadCases } from './conformance-lib.js';

/** SKIPS lists cases that need features no self-hosted server has, each with its reason. */
export const SKIPS: Record<string, string> = {
};

const root = conformanceDir();
if (!root) {
  t.fail('conformance data not found (expected ../shared/conformance relative to the repo)');
} else {
  for (const category of CATEGORIES) {
    t.test(`conformance ${category}`, async (tt) => {
      const cases = loadCases(root, category);
      tt.ok(cases.length > 0, 'has cases');
      let passed = 0;
      const failed: string[] = [];
      let skipped = 0;
      for (const c of cases) {
        if (c.id in SKIPS) { skipped++; continue; }
        const { diffs } = compareCase(c);
        if (diffs.length === 0) passed++;
        else failed.push(`${c.id}: ${diffs[0]!.split('\n')[0]}`);
      }
      console.log(`conformance ${category}: ${passed}/${cases.length - skipped}${skipped ? ` (${skipped} skipped)` : ''}`);
      tt.same(failed, [], `every ${category} case matches`);
    });
  }
}
