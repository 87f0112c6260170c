/**
 * How long configuration changes take to reach every worker of this node: each configuration's
 * current version, since when it exists (its change in the store, or the reload that found it),
 * and whether every worker has applied it. Served as tps_edge_config_apply_seconds (per change),
 * tps_edge_config_apply_lag_seconds and tps_edge_configs_pending_apply; the node's health reads
 * the same times (a configuration still applying past its grace is not served).
 */
import { Gauge, Histogram, type Registry } from 'prom-client';

interface Applying {
  version: string;
  since: number;
  applied: boolean;
}

export interface ApplyTrackingOptions {
  registry: Registry;
  /** Whether every worker of the node has applied (or failed) that version of a configuration. */
  appliedByAll: (id: string, version: string) => boolean;
  /** How often the supervisor looks at the store: a change this close before a reload is its own. */
  pollMs: number;
}

export class ApplyTracking {
  #applying = new Map<string, Applying>();
  #lastReloadAt = 0;
  readonly #applySeconds: Histogram<string>;
  readonly #options: ApplyTrackingOptions;

  constructor(options: ApplyTrackingOptions) {
    this.#options = options;
    const registers = [options.registry];
    this.#applySeconds = new Histogram({
      name: 'tps_edge_config_apply_seconds',
      help: 'Configuration changes, from the change in the store (its updatedAt) to every worker of this node serving it (or reporting it cannot).',
      buckets: [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
      registers,
    });
    const tracking = this;
    new Gauge({
      name: 'tps_edge_config_apply_lag_seconds',
      help: 'Age of the oldest configuration change this node has not applied in every worker yet (0: all applied).',
      registers,
      collect() {
        const now = Date.now();
        let oldest = now;
        for (const state of tracking.#applying.values()) if (!state.applied && state.since < oldest) oldest = state.since;
        this.set((now - oldest) / 1000);
      },
    });
    new Gauge({
      name: 'tps_edge_configs_pending_apply',
      help: 'Configurations whose current version is not applied by every worker of this node yet.',
      registers,
      collect() {
        let pending = 0;
        for (const state of tracking.#applying.values()) if (!state.applied) pending++;
        this.set(pending);
      },
    });
  }

  /**
   * Notes when each configuration's current version appeared: its change in the store (updatedAt)
   * when that happened since the previous reload, else now (a certificate renewed, the node
   * starting, a version that changed without the configuration's own row).
   */
  track(entries: readonly { config: { id: string }; version: string }[], records: readonly { id: string; updatedAt: string }[]): void {
    const now = Date.now();
    const updatedAt = new Map(records.map((record) => [record.id, Date.parse(record.updatedAt)]));
    const next = new Map<string, Applying>();
    for (const entry of entries) {
      const id = entry.config.id;
      const previous = this.#applying.get(id);
      if (previous !== undefined && previous.version === entry.version) {
        next.set(id, previous);
        continue;
      }
      const changed = updatedAt.get(id) ?? now;
      const since = this.#lastReloadAt > 0 && changed > this.#lastReloadAt - this.#options.pollMs && changed <= now ? changed : now;
      next.set(id, { version: entry.version, since, applied: false });
    }
    this.#applying = next;
    this.#lastReloadAt = now;
    for (const entry of entries) this.noteApplied(entry.config.id);
  }

  /** Once every worker has applied (or failed) a configuration's current version: the apply time is observed. */
  noteApplied(id: string): void {
    const state = this.#applying.get(id);
    if (state === undefined || state.applied) return;
    if (!this.#options.appliedByAll(id, state.version)) return;
    state.applied = true;
    this.#applySeconds.observe(Math.max(0, Date.now() - state.since) / 1000);
  }

  /** Since when the current version of a configuration exists (undefined: not tracked). */
  since(id: string): number | undefined {
    return this.#applying.get(id)?.since;
  }
}
