/**
 * A benchmark's side in a process of its own that prints "ready" on stdout once it listens
 * (bench/http and bench/waf's tps-proxy.ts).
 */
import { type ChildProcess, type SpawnOptions, spawn } from 'node:child_process';

/**
 * Spawns `command` (stdout piped, stderr inherited) and resolves once it printed "ready"; kills it
 * after `timeoutMs` without. `what` names it in errors.
 */
export function startReadyChild(
  what: string,
  command: string,
  args: readonly string[],
  options: SpawnOptions,
  timeoutMs: number,
): Promise<ChildProcess> {
  const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${what} was not ready after ${timeoutMs / 1000} s`));
    }, timeoutMs);
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (!out.includes('ready')) return;
      clearTimeout(timer);
      resolve(child);
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited (${signal ?? `code ${code}`}) before it was ready`));
    });
  });
}
