/**
 * The logger of an edge worker thread: the process's JSON lines (pino, same level, on the same
 * standard output as the main thread), limited per message so that a flood cannot turn into a flood
 * of log lines. Each message (its text) may be written `burst` times per `intervalMs`; the next line
 * of that message that gets through says how many were left out meanwhile (`suppressed`).
 */
import { pino, type Logger } from 'pino';

export interface EdgeWorkerLogger {
  info(details: object, message: string): void;
  warn(details: object, message: string): void;
  error(details: object, message: string): void;
  /** Writes what is buffered (before the thread exits). */
  flush(): void;
}

interface Window {
  startedAt: number;
  written: number;
  suppressed: number;
}

export function rateLimitedLogger(
  target: Logger,
  options: { burst?: number; intervalMs?: number; now?: () => number } = {},
): EdgeWorkerLogger {
  const burst = options.burst ?? 10;
  const intervalMs = options.intervalMs ?? 10_000;
  const now = options.now ?? Date.now;
  const windows = new Map<string, Window>();
  const write = (level: 'info' | 'warn' | 'error', details: object, message: string): void => {
    const at = now();
    let window = windows.get(message);
    if (window === undefined || at - window.startedAt >= intervalMs) {
      const suppressed = window?.suppressed ?? 0;
      window = { startedAt: at, written: 0, suppressed: 0 };
      windows.set(message, window);
      // Bounded: distinct messages are the code's own strings, but never keep more than a few hundred.
      if (windows.size > 512) for (const key of windows.keys()) if (windows.get(key) !== window) windows.delete(key);
      if (suppressed > 0) details = { ...details, suppressed };
    }
    if (window.written >= burst) {
      window.suppressed++;
      return;
    }
    window.written++;
    target[level](details, message);
  };
  return {
    info: (details, message) => write('info', details, message),
    warn: (details, message) => write('warn', details, message),
    error: (details, message) => write('error', details, message),
    flush: () => target.flush(),
  };
}

/** The worker's own pino, writing to the process's standard output like the main thread's. */
export function createWorkerLogger(level: string, bindings: Record<string, string | number>): EdgeWorkerLogger {
  // Synchronous writes: lines are few (rate limited) and none is lost when the thread exits.
  return rateLimitedLogger(pino({ level, base: { pid: process.pid, ...bindings } }, pino.destination({ dest: 1, sync: true })));
}
