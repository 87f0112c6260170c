/**
 * Which way the layers import (the graph: import-graph.ts; the layers: docs/architecture.md):
 * - the control plane and the store (src/store, src/certs, src/insight, src/api, src/config) import
 *   nothing from the data plane (src/edge): what both use lives below them (src/net, src/io,
 *   packages/model);
 * - src/edge/limits (the sliding windows, the flood caps, the counter-store interface) is below
 *   http, l4 and shared-counters, which import it; it imports none of them;
 * - the HTTP phases (src/edge/http/phases) import nothing of the upstream, and the upstream no
 *   request or response phase: the pipeline (src/edge/http/pipeline.ts) runs the request phases,
 *   then hands the upstream the response phases to run (both lists: phases/index.ts). Of
 *   phases/, the upstream imports the phases' shapes (phase.ts, answer.ts), the proxy's own
 *   answers (respond.ts) and the end phase, logging.ts, which every way out of a request runs.
 * Tests count: a test beside a module imports what the module may.
 */
import assert from 'node:assert/strict';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { importGraph, REPOSITORY, typeScriptFiles } from './import-graph.ts';

const graph = importGraph(typeScriptFiles(join(REPOSITORY, 'src')));
const where = (file: string) => relative(REPOSITORY, file);

/** `from -> specifier` for every import of a file under one of `from` into one of `into`. */
function importsInto(from: readonly string[], into: readonly string[]): string[] {
  const under = (file: string, dirs: readonly string[]) => dirs.some((dir) => where(file).startsWith(`${dir}/`));
  return [...graph].flatMap(([file, imports]) =>
    under(file, from)
      ? imports.filter((i) => i.target !== undefined && under(i.target, into)).map((i) => `${where(file)} -> ${i.specifier}`)
      : [],
  );
}

test('the control plane and the store import nothing from src/edge', () => {
  assert.deepEqual(importsInto(['src/store', 'src/certs', 'src/insight', 'src/api', 'src/config'], ['src/edge']), []);
});

test('the shared parts (src/net, src/io) import nothing from the layers above them', () => {
  assert.deepEqual(
    importsInto(['src/net', 'src/io'], ['src/edge', 'src/store', 'src/certs', 'src/insight', 'src/api', 'src/config', 'src/cli']),
    [],
  );
});

test('src/edge/limits imports nothing from http, l4, shared-counters or runtime, which import it', () => {
  const limits = ['src/edge/limits'];
  assert.deepEqual(importsInto(limits, ['src/edge/http', 'src/edge/l4', 'src/edge/shared-counters', 'src/edge/runtime']), []);
  for (const user of ['src/edge/http', 'src/edge/l4', 'src/edge/shared-counters'])
    assert.ok(importsInto([user], limits).length > 0, `${user} imports src/edge/limits`);
});

test('the HTTP phases import nothing from the upstream, the upstream no phase but their shapes (the pipeline wires both)', () => {
  assert.deepEqual(importsInto(['src/edge/http/phases'], ['src/edge/http/upstream']), []);
  const ofPhases = [...graph]
    .filter(([file]) => where(file).startsWith('src/edge/http/upstream/'))
    .flatMap(([, imports]) => imports.map((i) => i.target && where(i.target)))
    .filter((target) => target?.startsWith('src/edge/http/phases/'));
  assert.deepEqual([...new Set(ofPhases)].sort(), [
    'src/edge/http/phases/answer.ts',
    'src/edge/http/phases/logging.ts',
    'src/edge/http/phases/phase.ts',
    'src/edge/http/phases/respond.ts',
  ]);
});
