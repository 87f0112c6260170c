/**
 * The modules' imports form layers, not circles, everywhere under src/ and packages/ (the graph:
 * import-graph.ts). A value import loads the module at run time, so a circle of them makes one
 * module see another half-initialised; a circle of type imports is no bug at run time but knots
 * modules that should layer, so it is refused too: shared types live in their own types.ts files.
 */
import assert from 'node:assert/strict';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { importCircles, importGraph, REPOSITORY, typeScriptFiles } from './import-graph.ts';

const graph = importGraph([...typeScriptFiles(join(REPOSITORY, 'src')), ...typeScriptFiles(join(REPOSITORY, 'packages'))]);
const where = (file: string) => relative(REPOSITORY, file);
const describe = (circle: string[]) => `${circle.length} files: ${circle.join(', ')}`;

test('the parser sees the imports: the API server imports its route plugins, the routes the model', () => {
  const targetsOf = (file: string) => (graph.get(join(REPOSITORY, file)) ?? []).map((i) => i.target && where(i.target));
  assert.ok(targetsOf('src/api/server.ts').includes('src/api/routes/traffic-configs.ts'));
  assert.ok(targetsOf('src/api/routes/traffic-configs.ts').includes('packages/model/src/index.ts'));
  assert.ok(graph.size > 300, `${graph.size} files`);
});

test('no run-time import circle in src/ or packages/', () => {
  assert.deepEqual(importCircles(graph, false).map(describe), []);
});

test('no import circle in src/ or packages/ when type imports count', () => {
  assert.deepEqual(importCircles(graph, true).map(describe), []);
});

test('packages/model imports nothing from src/, and no package but TypeBox', () => {
  const model = [...graph].filter(([file]) => where(file).startsWith('packages/model/'));
  assert.ok(model.length > 0);
  assert.deepEqual(
    model.flatMap(([file, imports]) =>
      imports.filter((i) => i.target !== undefined && where(i.target).startsWith('src/')).map((i) => `${where(file)} -> ${i.specifier}`),
    ),
    [],
  );
  const outside = model.flatMap(([, imports]) =>
    imports.filter((i) => i.target === undefined && !i.specifier.startsWith('node:')).map((i) => i.specifier),
  );
  assert.deepEqual([...new Set(outside)], ['@sinclair/typebox']);
});
