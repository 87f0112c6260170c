/**
 * A CPU profile of our L4 proxy under the short-connection load of run.ts: starts the origin and
 * `our-proxy.ts` under `--cpu-prof`, runs the connection loops, stops the proxy (which writes its
 * profile) and prints the top self-time frames.
 *
 *   node bench/l4/profile.ts [seconds=8] [profileDir=<tmp>]
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = fileURLToPath(new URL('.', import.meta.url));
const seconds = Number(process.argv[2] ?? '8');
const dir = process.argv[3] ?? mkdtempSync(join(tmpdir(), 'tps-l4-profile-'));

function message<T>(child: ChildProcess, type: string): Promise<T> {
  return new Promise((resolve) => {
    const on = (m: { type: string }) => {
      if (m.type !== type) return;
      child.off('message', on);
      resolve(m as T);
    };
    child.on('message', on);
  });
}

const origin = fork(join(here, 'origin.ts'), ['127.0.0.31']);
const ports = await message<{ sinkPort: number; sourcePort: number; echoPort: number }>(origin, 'ready');
const settings = { address: '127.0.0.21', bulkPort: 0, downloadPort: 0, connPort: 47_321, origin: '127.0.0.31', ...ports };
const proxy = fork(join(here, 'our-proxy.ts'), [JSON.stringify(settings)], {
  execArgv: [...process.execArgv, '--cpu-prof', `--cpu-prof-dir=${dir}`],
});
await message(proxy, 'ready');
const loads = [0, 1].map(() => fork(join(here, 'load.ts'), ['connections', '127.0.0.21', '47321', '32', '0.5', String(seconds)]));
const results = await Promise.all(loads.map((load) => message<{ completed: number; failed: number }>(load, 'result')));
const completed = results.reduce((sum, r) => sum + r.completed, 0);
console.log(`${Math.round(completed / seconds)} conn/s while profiling`);
await new Promise<void>((resolve) => {
  proxy.once('exit', () => resolve());
  proxy.send({ type: 'exit' });
});
origin.send({ type: 'exit' });

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
const file = readdirSync(dir).find((name) => name.endsWith('.cpuprofile'))!;
const profile = JSON.parse(readFileSync(join(dir, file), 'utf8')) as { nodes: ProfileNode[]; samples: number[] };
const self = new Map<number, number>();
for (const id of profile.samples) self.set(id, (self.get(id) ?? 0) + 1);
const byFrame = new Map<string, number>();
for (const node of profile.nodes) {
  const { functionName, url, lineNumber } = node.callFrame;
  const key = `${functionName || '(anonymous)'} ${url.replace(/^.*\/(src|node_modules|bench)\//, '$1/')}:${lineNumber + 1}`;
  byFrame.set(key, (byFrame.get(key) ?? 0) + (self.get(node.id) ?? 0));
}
const total = profile.samples.length;
console.log(`profile: ${join(dir, file)} (${total} samples)`);
for (const [frame, count] of [...byFrame].sort((a, b) => b[1] - a[1]).slice(0, 40)) {
  console.log(`${((count / total) * 100).toFixed(1).padStart(5)}%  ${frame}`);
}
