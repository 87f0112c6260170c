/**
 * The rules of packages/ (DESIGN.md's layout), checked on the import graph (import-graph.ts):
 * - no import circle among the packages' modules, type-only imports included;
 * - no package imports from src/;
 * - @tps/waf imports nothing from src/, native code or another package but @tps/libinjection;
 * - @tps/libinjection imports nothing but Node's own modules;
 * - a package reaches another by its name (never by a path into it), and only one its
 *   package.json lists; the packages' dependencies have no circle;
 * - the product (src/) loads @tps/waf-modsecurity only dynamically: it runs without it.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { importCircles, importGraph, REPOSITORY, typeScriptFiles } from './import-graph.ts';

const PACKAGES = join(REPOSITORY, 'packages');
const packageDirs = readdirSync(PACKAGES).filter((name) => !name.startsWith('.'));
interface Manifest {
  readonly name: string;
  readonly dependencies?: Record<string, string>;
  readonly optionalDependencies?: Record<string, string>;
  readonly devDependencies?: Record<string, string>;
}
const manifests = new Map(
  packageDirs.map((dir) => [dir, JSON.parse(readFileSync(join(PACKAGES, dir, 'package.json'), 'utf8')) as Manifest]),
);
const graph = importGraph(packageDirs.flatMap((dir) => typeScriptFiles(join(PACKAGES, dir))));
const builtins = new Set(builtinModules);

/** The package folder a file is in ('waf', 'libinjection' ...), or undefined outside packages/. */
function packageOf(file: string): string | undefined {
  const path = relative(PACKAGES, file);
  return path.startsWith('..') ? undefined : path.split('/')[0];
}

/** The package a bare specifier names: `@tps/model` of `@tps/model/some/path`. */
const packageName = (specifier: string): string => specifier.split('/').slice(0, 2).join('/');
const isBuiltin = (specifier: string): boolean => specifier.startsWith('node:') || builtins.has(specifier);
const where = (file: string): string => relative(REPOSITORY, file);

test('packages: no import circle among their modules (type-only imports count)', () => {
  assert.ok(graph.size > 100, `the graph has the packages' modules (${graph.size})`);
  assert.deepEqual(importCircles(graph, true), []);
});

test('packages: @tps/waf imports nothing from src/, native/ or another package but @tps/libinjection', () => {
  const wrong: string[] = [];
  const testTools = new Set(Object.keys(manifests.get('waf')!.devDependencies ?? {}));
  for (const [file, imports] of graph) {
    if (packageOf(file) !== 'waf') continue;
    for (const i of imports) {
      const inside = i.target !== undefined && packageOf(i.target) === 'waf' && i.specifier.startsWith('.');
      if (inside || isBuiltin(i.specifier) || i.specifier === '@tps/libinjection') continue;
      if (file.endsWith('.test.ts') && testTools.has(i.specifier)) continue;
      wrong.push(`${where(file)}: ${i.specifier}`);
    }
    assert.doesNotMatch(readFileSync(file, 'utf8'), /\.node['"]|createRequire|process\.dlopen/, `${where(file)} loads no native code`);
  }
  assert.deepEqual(wrong, []);
});

test('packages: none imports from src/ (the product is built on them, never the other way)', () => {
  const wrong = [...graph].flatMap(([file, imports]) =>
    imports.filter((i) => i.target !== undefined && where(i.target).startsWith('src/')).map((i) => `${where(file)}: ${i.specifier}`),
  );
  assert.deepEqual(wrong, []);
});

test('packages: @tps/libinjection imports nothing but Node and its own modules', () => {
  const wrong: string[] = [];
  for (const [file, imports] of graph) {
    if (packageOf(file) !== 'libinjection') continue;
    for (const i of imports) {
      if (isBuiltin(i.specifier) || (i.target !== undefined && packageOf(i.target) === 'libinjection' && i.specifier.startsWith('.')))
        continue;
      wrong.push(`${where(file)}: ${i.specifier}`);
    }
  }
  assert.deepEqual(wrong, []);
});

test('packages: one reaches another by its name, and only one its package.json lists; their dependencies have no circle', () => {
  const wrong: string[] = [];
  for (const [file, imports] of graph) {
    const own = packageOf(file)!;
    const manifest = manifests.get(own)!;
    const declared = new Set([...Object.keys(manifest.dependencies ?? {}), ...Object.keys(manifest.optionalDependencies ?? {})]);
    // a package's tests may also use its test tools (the seeded generator of @tps/waf-conformance)
    if (file.endsWith('.test.ts')) for (const tool of Object.keys(manifest.devDependencies ?? {})) declared.add(tool);
    for (const i of imports) {
      if (i.specifier.startsWith('.')) {
        const target = i.target !== undefined ? packageOf(i.target) : undefined;
        if (target !== own) wrong.push(`${where(file)}: ${i.specifier} goes into another package by path`);
      } else if (i.specifier.startsWith('@tps/') && !declared.has(packageName(i.specifier))) {
        wrong.push(`${where(file)}: ${i.specifier} is not in ${own}/package.json`);
      }
    }
  }
  assert.deepEqual(wrong, []);
  // the packages' own dependency graph
  const byName = new Map([...manifests].map(([dir, m]) => [m.name, dir]));
  const visiting = new Set<string>();
  const done = new Set<string>();
  const visit = (name: string, path: string[]): void => {
    if (done.has(name)) return;
    assert.ok(!visiting.has(name), `package dependency circle: ${[...path, name].join(' -> ')}`);
    visiting.add(name);
    const m = manifests.get(byName.get(name)!)!;
    for (const dep of Object.keys({ ...m.dependencies, ...m.optionalDependencies })) if (byName.has(dep)) visit(dep, [...path, name]);
    visiting.delete(name);
    done.add(name);
  };
  for (const name of byName.keys()) visit(name, []);
});

test('the product loads @tps/waf-modsecurity only dynamically (it installs and runs without it)', () => {
  const product = importGraph([...typeScriptFiles(join(REPOSITORY, 'src')), ...typeScriptFiles(join(REPOSITORY, 'bin'))]);
  const statics: string[] = [];
  let dynamic = 0;
  for (const [file, imports] of product) {
    for (const i of imports) {
      if (i.specifier !== '@tps/waf-modsecurity' || i.typeOnly) continue;
      if (i.dynamic) dynamic++;
      else statics.push(where(file));
    }
  }
  assert.deepEqual(statics, []);
  assert.equal(dynamic, 1, 'one place loads it (src/edge/http/waf/engines.ts)');
});

test('the circle check finds a circle, a type-only one when asked to', () => {
  const a = join(REPOSITORY, 'a.ts');
  const b = join(REPOSITORY, 'b.ts');
  const circle = new Map([
    [a, [{ specifier: './b.ts', target: b, typeOnly: true, dynamic: false }]],
    [b, [{ specifier: './a.ts', target: a, typeOnly: false, dynamic: false }]],
  ]);
  assert.deepEqual(importCircles(circle, true), [['a.ts', 'b.ts']]);
  assert.deepEqual(importCircles(circle, false), []);
});
