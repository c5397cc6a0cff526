import t from 'tap';
import { readFileSync } from 'node:fs';
import YAML from 'yaml';
import { KEYS, resolveConfig } from '../src/index.js';

const example = new URL('../../../../examples/config.example.yaml', import.meta.url);

t.test('examples/config.example.yaml documents every key and is itself valid', async (t) => {
  const text = readFileSync(example, 'utf8');
  const doc = YAML.parse(text) as Record<string, unknown>;
  const flat = new Set<string>();
  const walk = (o: Record<string, unknown>, prefix: string) => {
    for (const [k, v] of Object.entries(o)) {
      const key = prefix ? `${prefix}.${k}` : k;
      if (key in KEYS) flat.add(key);
      else if (v && typeof v === 'object' && !Array.isArray(v)) walk(v as Record<string, unknown>, key);
    }
  };
  walk(doc, '');
  t.same([...flat].sort(), Object.keys(KEYS).sort(), 'every key present (run scripts/gen-config-example.mjs after adding one)');
  const { problems } = resolveConfig(doc, {});
  t.same(problems.filter((p) => p.level !== 'warn'), [], 'the example passes validation');
});
