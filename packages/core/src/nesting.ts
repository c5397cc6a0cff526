/**
 * nestingDepth counts how deeply objects and lists nest in a parsed JSON value (a scalar is 0, `[]` is 1,
 * `[[1]]` is 2), with a stack of its own rather than recursion, so a value nested a million levels deep is
 * measured, not a stack overflow. It stops looking once it has seen more than `stopAt` levels and answers
 * that depth: callers only ask whether a value passes their cap.
 */
export function nestingDepth(value: unknown, stopAt: number): number {
  let max = 0;
  const stack: Array<[unknown, number]> = [[value, 0]];
  while (stack.length) {
    const [v, d] = stack.pop()!;
    if (!v || typeof v !== 'object') continue;
    if (d + 1 > max) max = d + 1;
    if (max > stopAt) break;
    for (const c of Object.values(v)) stack.push([c, d + 1]);
  }
  return max;
}
