/**
 * The data plane's layering, checked on the import graph (import-graph.ts): no import circle in
 * src/edge. A circle of value imports decides which module of it runs first by the order of the
 * files' import lines (a value read before its module ran is undefined), and whatever sits on a
 * circle cannot be read or tested on its own. Type-only imports vanish at run time; circles through
 * them are refused too, so that shared types stay in `types.ts` files rather than in the modules
 * that hold code.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { importCircles, importGraph, REPOSITORY, typeScriptFiles } from './import-graph.ts';

const graph = importGraph(typeScriptFiles(join(REPOSITORY, 'src/edge')));
const described = (circles: string[][]): string => circles.map((circle) => `circle of ${circle.length}: ${circle.join(', ')}`).join('\n');

test('src/edge: no circle of value imports', () => {
  assert.ok(graph.size > 100, `the graph has the data plane's modules (${graph.size})`);
  const circles = importCircles(graph, false);
  assert.equal(circles.length, 0, described(circles));
});

test('src/edge: no circle through type-only imports either (shared types live in types.ts files)', () => {
  const circles = importCircles(graph, true);
  assert.equal(circles.length, 0, described(circles));
});
