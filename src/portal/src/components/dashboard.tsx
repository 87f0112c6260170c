/** Pieces of both dashboards: the filter bar, the totals, the time chart (uPlot) and the top lists. */
import type { ComponentChildren } from 'preact';
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import { api, type TopEntry } from '../api.ts';
import { proxyLabel } from '../pages/proxies.tsx';
import { formatNumber, navigate, useLoad } from '../ui.tsx';

export const RANGES = [
  { key: '1h', label: 'Last hour', seconds: 3600 },
  { key: '6h', label: 'Last 6 hours', seconds: 6 * 3600 },
  { key: '24h', label: 'Last 24 hours', seconds: 86_400 },
  { key: '7d', label: 'Last 7 days', seconds: 7 * 86_400 },
  { key: '30d', label: 'Last 30 days', seconds: 30 * 86_400 },
];

/** The filters of a dashboard URL: proxy and range, plus the event list's narrowing. */
export function readFilters(query: URLSearchParams) {
  const range = RANGES.find((candidate) => candidate.key === query.get('range')) ?? RANGES[2]!;
  return {
    proxy: query.get('proxy') ?? '',
    range,
    rule: query.get('rule') ?? '',
    ip: query.get('ip') ?? '',
    country: query.get('country') ?? '',
    path: query.get('path') ?? '',
  };
}

export type Filters = ReturnType<typeof readFilters>;

/** A URL of the same dashboard with some filters changed. */
export function withFilters(base: string, query: URLSearchParams, changes: Record<string, string | undefined>): string {
  const next = new URLSearchParams(query);
  for (const [key, value] of Object.entries(changes)) {
    if (value === undefined || value === '') next.delete(key);
    else next.set(key, value);
  }
  const search = next.toString();
  return search ? `${base}?${search}` : base;
}

export function FilterBar(props: {
  base: string;
  query: URLSearchParams;
  filters: Filters;
  onRefresh: () => void;
  children?: ComponentChildren;
}) {
  const proxies = useLoad(() => api.proxies(), []);
  const go = (changes: Record<string, string | undefined>) => navigate(withFilters(props.base, props.query, changes));
  return (
    <div class="filter-bar">
      <label>
        <span>Proxy</span>
        <select name="proxy" value={props.filters.proxy} onChange={(e) => go({ proxy: e.currentTarget.value })} data-testid="filter-proxy">
          <option value="">All proxies</option>
          {proxies.data?.data.map((proxy) => (
            <option value={proxy.id}>{proxyLabel(proxy)}</option>
          ))}
        </select>
      </label>
      <label>
        <span>Time range</span>
        <select
          name="range"
          value={props.filters.range.key}
          onChange={(e) => go({ range: e.currentTarget.value })}
          data-testid="filter-range"
        >
          {RANGES.map((range) => (
            <option value={range.key}>{range.label}</option>
          ))}
        </select>
      </label>
      {props.children}
      <button class="btn btn-small" type="button" onClick={props.onRefresh}>
        Refresh
      </button>
    </div>
  );
}

export function Stat(props: { label: string; value: number | string; tone?: string; testid: string; sub?: ComponentChildren }) {
  return (
    <div class={`stat ${props.tone ?? ''}`}>
      <div class="stat-label">{props.label}</div>
      <div class="stat-value" data-testid={props.testid}>
        {typeof props.value === 'number' ? formatNumber(props.value) : props.value}
      </div>
      {props.sub && <div class="stat-sub">{props.sub}</div>}
    </div>
  );
}

export interface ChartSeries {
  label: string;
  color: string;
  values: number[];
}

/**
 * Stacked bars over time: each series is drawn on top of the ones before it (uPlot draws the
 * cumulative sums; the legend shows each series' own value).
 */
export function TimeChart(props: { starts: string[]; series: ChartSeries[]; height?: number; testid?: string; stepSeconds: number }) {
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const element = box.current;
    if (!element) return;
    const x = props.starts.map((start) => Date.parse(start) / 1000 + props.stepSeconds / 2);
    const cumulative: number[][] = [];
    for (const [index, series] of props.series.entries()) {
      cumulative.push(series.values.map((value, i) => value + (index ? cumulative[index - 1]![i]! : 0)));
    }
    const bars = uPlot.paths.bars!({ size: [0.86, 48], gap: 1 });
    const options: uPlot.Options = {
      width: Math.max(320, element.clientWidth),
      height: props.height ?? 220,
      padding: [12, 8, 0, 0],
      cursor: { points: { show: false }, drag: { x: false, y: false } },
      legend: { show: true, live: true },
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(4, Math.ceil(max * 1.12))] } },
      axes: [
        { stroke: '#64748b', grid: { stroke: '#eef2f7' }, ticks: { stroke: '#e2e8f0' } },
        {
          stroke: '#64748b',
          grid: { stroke: '#eef2f7' },
          ticks: { stroke: '#e2e8f0' },
          size: 48,
          values: (_u, splits) => splits.map((v) => formatNumber(v)),
        },
      ],
      series: [
        {
          label: 'Time',
          value: (_u, v) =>
            v == null ? '—' : `${new Date((v - props.stepSeconds / 2) * 1000).toISOString().slice(0, 16).replace('T', ' ')} UTC`,
        },
        // Drawn last-to-first so that the lower segments cover the cumulative bars above them.
        ...props.series
          .map((series, index) => ({
            label: series.label,
            stroke: series.color,
            fill: series.color,
            width: 0,
            paths: bars,
            points: { show: false },
            value: (_u: uPlot, _v: number | null, _s: number, idx: number | null) =>
              idx == null ? '—' : formatNumber(props.series[index]!.values[idx] ?? 0),
          }))
          .reverse(),
      ],
    };
    const data = [x, ...cumulative.slice().reverse()] as uPlot.AlignedData;
    const plot = new uPlot(options, data, element);
    const resize = new ResizeObserver(() => plot.setSize({ width: Math.max(320, element.clientWidth), height: props.height ?? 220 }));
    resize.observe(element);
    return () => {
      resize.disconnect();
      plot.destroy();
    };
  }, [props.starts, props.series]);
  return <div class="chart" ref={box} data-testid={props.testid} />;
}

export function TopList(props: {
  title: string;
  entries: TopEntry[];
  testid: string;
  render: (entry: TopEntry) => ComponentChildren;
  link?: (entry: TopEntry) => string;
  split?: boolean;
  unit?: string;
}) {
  const max = Math.max(1, ...props.entries.map((entry) => entry.events));
  return (
    <div class="top-list" data-testid={props.testid}>
      <h3>{props.title}</h3>
      {props.entries.length === 0 && <div class="muted small">No events in this range.</div>}
      <ol>
        {props.entries.map((entry) => (
          <li data-key={entry.key}>
            <div class="top-row">
              <span class="top-name">
                {props.link ? (
                  <a
                    href={props.link(entry)}
                    onClick={(event) => {
                      event.preventDefault();
                      navigate(props.link!(entry));
                    }}
                  >
                    {props.render(entry)}
                  </a>
                ) : (
                  props.render(entry)
                )}
              </span>
              <span class="top-count" data-testid="count">
                {formatNumber(entry.events)}
              </span>
            </div>
            <div class="bar" title={props.split ? `${entry.blocked} blocked, ${entry.logged} logged` : undefined}>
              {props.split ? (
                <>
                  <span class="bar-blocked" style={{ width: `${(entry.blocked / max) * 100}%` }} />
                  <span class="bar-logged" style={{ width: `${(entry.logged / max) * 100}%` }} />
                </>
              ) : (
                <span class="bar-single" style={{ width: `${(entry.events / max) * 100}%` }} />
              )}
            </div>
          </li>
        ))}
      </ol>
    </div>
  );
}
