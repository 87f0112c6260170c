/**
 * The modules' imports form layers, not circles. Every .ts/.tsx file under src/ and packages/ is
 * parsed (TypeScript's parser, no type checking) and its static imports and re-exports followed:
 * relative paths, and the workspace packages (packages/NAME, by the `exports` of their
 * package.json).
 *
 * A value import loads the module at run time, so a circle of them makes one module see another
 * half-initialised. `import { type X }` is a value import too: type stripping keeps it as
 * `import {} from`, which loads the module. Only `import type` / `export type` are left out of the
 * run-time graph; circles through them are checked separately (they are not bugs at run time, but
 * they knot modules that should layer).
 *
 * Asserted: no circle at all touching the control plane (src/api, src/store, src/certs, src/auth,
 * src/config, src/cli), the data plane (src/edge: shared types live in its types.ts files) or
 * packages/model, and packages/model imports nothing from src/. Circles elsewhere are reported
 * (test diagnostics) rather than failed.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const ASSERTED = ['src/api/', 'src/store/', 'src/certs/', 'src/auth/', 'src/config/', 'src/cli/', 'src/edge/', 'packages/model/'];

interface Edge {
  to: string;
  /** `import type` / `export type`: erased, nothing is loaded at run time. */
  typeOnly: boolean;
}

function sourceFiles(folder: string): string[] {
  if (!fs.existsSync(folder)) return [];
  return fs.readdirSync(folder, { withFileTypes: true, recursive: true }).flatMap((entry) => {
    const file = path.join(entry.parentPath, entry.name);
    const relative = path.relative(ROOT, file);
    if (!entry.isFile() || !/\.tsx?$/.test(entry.name) || entry.name.endsWith('.d.ts')) return [];
    if (relative.split(path.sep).some((part) => part === 'node_modules' || part === 'dist')) return [];
    return [relative];
  });
}

/** Workspace package name (and subpaths) -> the file its `exports` names. */
function workspaceEntries(): Map<string, string> {
  const entries = new Map<string, string>();
  const packages = path.join(ROOT, 'packages');
  if (!fs.existsSync(packages)) return entries;
  for (const folder of fs.readdirSync(packages)) {
    const manifestPath = path.join(packages, folder, 'package.json');
    if (!fs.existsSync(manifestPath)) continue;
    const manifest = JSON.parse(fs.readFileSync(manifestPath, 'utf8')) as { name: string; exports?: string | Record<string, unknown> };
    const exportsField = typeof manifest.exports === 'string' ? { '.': manifest.exports } : (manifest.exports ?? {});
    for (const [subpath, target] of Object.entries(exportsField)) {
      if (typeof target !== 'string') continue;
      const specifier = subpath === '.' ? manifest.name : `${manifest.name}/${subpath.replace(/^\.\//, '')}`;
      entries.set(specifier, path.join('packages', folder, target));
    }
  }
  return entries;
}

function importsOf(file: string, workspace: Map<string, string>): Edge[] {
  const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false, file.endsWith('x') ? ts.ScriptKind.TSX : ts.ScriptKind.TS);
  const edges: Edge[] = [];
  for (const statement of source.statements) {
    let specifier: string | undefined;
    let typeOnly = false;
    if (ts.isImportDeclaration(statement) && ts.isStringLiteral(statement.moduleSpecifier)) {
      specifier = statement.moduleSpecifier.text;
      typeOnly = statement.importClause?.isTypeOnly ?? false;
    } else if (ts.isExportDeclaration(statement) && statement.moduleSpecifier && ts.isStringLiteral(statement.moduleSpecifier)) {
      specifier = statement.moduleSpecifier.text;
      typeOnly = statement.isTypeOnly;
    }
    if (specifier === undefined) continue;
    const target = specifier.startsWith('.') ? path.join(path.dirname(file), specifier) : workspace.get(specifier);
    if (target !== undefined) edges.push({ to: path.normalize(target), typeOnly });
  }
  return edges;
}

/** The strongly connected components of more than one file (or a file importing itself): the circles. */
function circles(graph: Map<string, string[]>): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (node: string) => {
    index.set(node, counter);
    low.set(node, counter++);
    stack.push(node);
    onStack.add(node);
    for (const next of graph.get(node) ?? []) {
      if (!graph.has(next)) continue;
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node)!, low.get(next)!));
      } else if (onStack.has(next)) {
        low.set(node, Math.min(low.get(node)!, index.get(next)!));
      }
    }
    if (low.get(node) !== index.get(node)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
    } while (member !== node);
    if (component.length > 1 || graph.get(node)!.includes(node)) found.push(component.sort());
  };
  for (const node of graph.keys()) if (!index.has(node)) visit(node);
  return found;
}

const workspace = workspaceEntries();
const files = [...sourceFiles(path.join(ROOT, 'src')), ...sourceFiles(path.join(ROOT, 'packages'))];
const imports = new Map(files.map((file) => [file, importsOf(file, workspace)]));
const graphOf = (includeTypeOnly: boolean) =>
  new Map([...imports].map(([file, edges]) => [file, edges.filter((edge) => includeTypeOnly || !edge.typeOnly).map((edge) => edge.to)]));
const asserted = (circle: string[]) => circle.some((file) => ASSERTED.some((folder) => file.startsWith(folder)));
const describe = (circle: string[]) => `${circle.length} files: ${circle.join(', ')}`;

test('the parser sees the imports: the API server imports its route plugins and the model', () => {
  const server = imports.get(path.join('src', 'api', 'server.ts'))!.map((edge) => edge.to);
  assert.ok(server.includes(path.join('src', 'api', 'routes', 'traffic-configs.ts')), server.join(', '));
  const routes = imports.get(path.join('src', 'api', 'routes', 'traffic-configs.ts'))!.map((edge) => edge.to);
  assert.ok(routes.includes(path.join('packages', 'model', 'src', 'index.ts')), routes.join(', '));
  assert.ok(files.length > 100, `${files.length} files`);
});

test('no run-time import circle in the control plane, the data plane or the model; the others are reported', (t) => {
  const found = circles(graphOf(false));
  for (const circle of found.filter((circle) => !asserted(circle))) t.diagnostic(`value-import circle (not asserted): ${describe(circle)}`);
  assert.deepEqual(found.filter(asserted).map(describe), []);
});

test('no import circle either in the control plane, the data plane or the model when type imports count', (t) => {
  const found = circles(graphOf(true));
  for (const circle of found.filter((circle) => !asserted(circle))) t.diagnostic(`circle with type imports (not asserted): ${describe(circle)}`);
  assert.deepEqual(found.filter(asserted).map(describe), []);
});

test('packages/model imports nothing from src/', () => {
  const model = [...imports].filter(([file]) => file.startsWith(path.join('packages', 'model') + path.sep));
  assert.ok(model.length > 0);
  const intoSrc = model.flatMap(([file, edges]) => edges.filter((edge) => edge.to.startsWith(`src${path.sep}`)).map((edge) => `${file} -> ${edge.to}`));
  assert.deepEqual(intoSrc, []);
  // Its only outside dependency is TypeBox: no package of the service's.
  const packages = model.flatMap(([file]) => {
    const source = fs.readFileSync(path.join(ROOT, file), 'utf8');
    return [...source.matchAll(/^(?:import|export)[^'"]*from '([^'.][^']*)'/gm)].map((match) => match[1]!);
  });
  assert.deepEqual([...new Set(packages)], ['@sinclair/typebox']);
});
