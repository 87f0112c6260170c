/**
 * Latency histograms of the edge workers. A worker cannot touch the process's Prometheus registry
 * (it lives in the supervisor's thread), and a message per request would cost more than the request's
 * own bookkeeping: so each worker adds observations into bucket counts of its own, sends them with
 * its counters once a second, and the supervisor adds them into one histogram per name
 * (`MergedHistogram`), served as any prom-client metric.
 */
import type { Metric, Registry } from 'prom-client';
import { EDGE_HISTOGRAMS, type EdgeHistogramName } from './metric-catalogue.ts';

/** Observations of one histogram and label set, since the last flush. `buckets[i]` counts values <= bounds[i]; the last entry is +Inf. */
export interface HistogramIncrement {
  name: EdgeHistogramName;
  labels: Record<string, string>;
  buckets: number[];
  sum: number;
  count: number;
}

/** A worker's observations, kept as bucket counts until they are taken (one entry per name and label set). */
export class HistogramBatch {
  readonly #pending = new Map<string, HistogramIncrement>();

  observe(name: EdgeHistogramName, labels: Record<string, string>, seconds: number): void {
    if (!Number.isFinite(seconds) || seconds < 0) return;
    const key = `${name}|${Object.values(labels).join('|')}`;
    let entry = this.#pending.get(key);
    if (entry === undefined) {
      entry = { name, labels, buckets: new Array<number>(EDGE_HISTOGRAMS[name].buckets.length + 1).fill(0), sum: 0, count: 0 };
      this.#pending.set(key, entry);
    }
    entry.buckets[bucketIndex(EDGE_HISTOGRAMS[name].buckets, seconds)]!++;
    entry.sum += seconds;
    entry.count++;
  }

  get size(): number {
    return this.#pending.size;
  }

  take(): HistogramIncrement[] {
    const taken = [...this.#pending.values()];
    this.#pending.clear();
    return taken;
  }
}

function bucketIndex(bounds: readonly number[], value: number): number {
  for (let index = 0; index < bounds.length; index++) if (value <= bounds[index]!) return index;
  return bounds.length;
}

interface Series {
  labels: Record<string, string>;
  buckets: number[];
  sum: number;
  count: number;
}

/**
 * A Prometheus histogram whose observations arrive as bucket counts (HistogramIncrement). It has
 * the shape prom-client's registry reads from its own metrics (`get()`), so it is served with them.
 */
export class MergedHistogram {
  readonly name: string;
  readonly help: string;
  readonly type = 'histogram' as const;
  readonly aggregator = 'sum' as const;
  readonly #bounds: readonly number[];
  readonly #series = new Map<string, Series>();

  constructor(name: EdgeHistogramName, registry: Registry) {
    const definition = EDGE_HISTOGRAMS[name];
    this.name = name;
    this.help = definition.help;
    this.#bounds = definition.buckets;
    // prom-client's registry reads name, help, type and get() only; a Metric subclass would bring
    // an observe() this histogram cannot offer (its observations come whole from the workers).
    registry.registerMetric(this as unknown as Metric<string>);
  }

  add(increment: HistogramIncrement): void {
    const key = Object.values(increment.labels).join('|');
    let series = this.#series.get(key);
    if (series === undefined) {
      series = { labels: { ...increment.labels }, buckets: new Array<number>(this.#bounds.length + 1).fill(0), sum: 0, count: 0 };
      this.#series.set(key, series);
    }
    for (let index = 0; index < series.buckets.length; index++) series.buckets[index]! += increment.buckets[index] ?? 0;
    series.sum += increment.sum;
    series.count += increment.count;
  }

  /** Drops the series of proxies no longer served (their label sets would otherwise stay forever). */
  retain(keep: (labels: Record<string, string>) => boolean): void {
    for (const [key, series] of this.#series) if (!keep(series.labels)) this.#series.delete(key);
  }

  /** The count of one label set (tests, diagnostics). */
  countOf(labels: Record<string, string>): number {
    return this.#series.get(Object.values(labels).join('|'))?.count ?? 0;
  }

  reset(): void {
    this.#series.clear();
  }

  async get(): Promise<{
    name: string;
    help: string;
    type: 'histogram';
    aggregator: 'sum';
    values: { metricName: string; labels: Record<string, string | number>; value: number }[];
  }> {
    const values: { metricName: string; labels: Record<string, string | number>; value: number }[] = [];
    for (const series of this.#series.values()) {
      let cumulative = 0;
      for (let index = 0; index < this.#bounds.length; index++) {
        cumulative += series.buckets[index]!;
        values.push({ metricName: `${this.name}_bucket`, labels: { ...series.labels, le: this.#bounds[index]! }, value: cumulative });
      }
      values.push({ metricName: `${this.name}_bucket`, labels: { ...series.labels, le: '+Inf' }, value: series.count });
      values.push({ metricName: `${this.name}_sum`, labels: series.labels, value: series.sum });
      values.push({ metricName: `${this.name}_count`, labels: series.labels, value: series.count });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }
}
