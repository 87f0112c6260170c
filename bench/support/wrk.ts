/** Runs `wrk` and reads its report. */
import { spawn } from 'node:child_process';

export interface WrkOptions {
  url: string;
  seconds: number;
  connections: number;
  /** wrk threads; default 1. */
  threads?: number;
  /** Extra request headers, "Name: value" each (wrk -H). */
  headers?: readonly string[];
  /** A wrk Lua script (wrk -s), e.g. to set wrk.method and wrk.body. */
  script?: string;
  /** Pin wrk to these CPUs with taskset ("0", "0-1"). */
  cpus?: string;
}

export interface WrkResult {
  rps: number;
  p50Ms: number;
  p99Ms: number;
  requests: number;
  /** Responses with a status outside 2xx-3xx. */
  non2xx: number;
  /** Socket errors (connect + read + write + timeout). */
  socketErrors: number;
  /** wrk's own error lines, joined ('' when none). */
  errors: string;
}

/** "1.23ms" / "850.00us" / "1.02s" -> milliseconds. */
export function wrkDurationMs(value: string): number {
  const match = /^([\d.]+)(us|ms|s|m)$/.exec(value.trim());
  if (!match) return NaN;
  const n = Number(match[1]);
  switch (match[2]) {
    case 'us':
      return n / 1000;
    case 's':
      return n * 1000;
    case 'm':
      return n * 60_000;
    default:
      return n;
  }
}

/** Reads the report `wrk --latency` prints. */
export function parseWrkOutput(out: string): WrkResult {
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? NaN);
  const p50 = /^\s+50%\s+(\S+)/m.exec(out)?.[1] ?? '';
  const p99 = /^\s+99%\s+(\S+)/m.exec(out)?.[1] ?? '';
  const requests = Number(/(\d+) requests in/.exec(out)?.[1] ?? NaN);
  const socketLine = /Socket errors:[^\n]*/.exec(out)?.[0];
  const non2xxLine = /Non-2xx or 3xx responses:[^\n]*/.exec(out)?.[0];
  const socketErrors = socketLine ? [...socketLine.matchAll(/ (\d+)/g)].reduce((sum, m) => sum + Number(m[0]), 0) : 0;
  const non2xx = non2xxLine ? Number(/responses:\s*(\d+)/.exec(non2xxLine)?.[1] ?? 0) : 0;
  const errors = [socketLine, non2xxLine].filter(Boolean).join('; ');
  return { rps, p50Ms: wrkDurationMs(p50), p99Ms: wrkDurationMs(p99), requests, non2xx, socketErrors, errors };
}

/** Runs wrk once (with --latency) and resolves with its report. */
export function runWrk(options: WrkOptions): Promise<WrkResult> {
  const args = [`-t${options.threads ?? 1}`, `-c${options.connections}`, `-d${options.seconds}s`, '--latency'];
  for (const header of options.headers ?? []) args.push('-H', header);
  if (options.script) args.push('-s', options.script);
  args.push(options.url);
  return new Promise((resolve, reject) => {
    const child = options.cpus
      ? spawn('taskset', ['-c', options.cpus, 'wrk', ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
      : spawn('wrk', args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => {
      const result = parseWrkOutput(out);
      if (code !== 0 && !Number.isFinite(result.requests)) reject(new Error(`wrk exited with ${code}: ${out}`));
      else resolve(result);
    });
  });
}
