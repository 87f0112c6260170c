/**
 * In a proxy worker: refusals of blocked sources, added up per (proxy, source) and sent to the
 * supervisor a few times a second, which decides the kernel escalation for the node's workers
 * together (escalation.ts). One map entry per source refused since the last report: a flood of
 * refusals costs a counter increment each, and the report is bounded by MAX_SOURCES_PER_REPORT.
 */
import type { KernelBlockReason, SourceRefusals } from './types.ts';

export const REFUSAL_REPORT_MS = 250;
const MAX_SOURCES_PER_REPORT = 10_000;

export class RefusalTally {
  #pending = new Map<string, SourceRefusals>();
  readonly #send: (refusals: SourceRefusals[]) => void;
  #timer: NodeJS.Timeout | undefined;

  constructor(send: (refusals: SourceRefusals[]) => void) {
    this.#send = send;
  }

  note(proxyId: string, source: string, reason: KernelBlockReason, blockedUntil: number, count = 1): void {
    const key = `${reason}|${proxyId}|${source}`;
    const existing = this.#pending.get(key);
    if (existing !== undefined) {
      existing.count += count;
      if (blockedUntil > existing.blockedUntil) existing.blockedUntil = blockedUntil;
      return;
    }
    // Past the bound, more sources wait for the next report (those already counted are enough to act on).
    if (this.#pending.size >= MAX_SOURCES_PER_REPORT) return;
    this.#pending.set(key, { proxyId, source, reason, count, blockedUntil });
    this.#timer ??= setTimeout(this.flush, REFUSAL_REPORT_MS).unref();
  }

  readonly flush = (): void => {
    this.#timer = undefined;
    if (this.#pending.size === 0) return;
    const refusals = [...this.#pending.values()];
    this.#pending = new Map();
    this.#send(refusals);
  };
}
