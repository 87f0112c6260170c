/** The rate-limiting view: APP_DDOS_ATTACK episodes (one per client and episode) over time and by source. */
import { useEffect, useMemo, useState } from 'preact/hooks';
import { portal, type EventResource } from '../api.ts';
import { FilterBar, readFilters, Stat, TimeChart, TopList, withFilters } from '../components/dashboard.tsx';
import { Card, countryName, CountryTag, Empty, formatNumber, formatTime, Link, Loading, PageHeader, Problem, useLoad } from '../ui.tsx';
import { EventBody } from './waf-dashboard.tsx';

const BASE = '/rate-limiting';

export function RateLimitDashboardPage(props: { query: URLSearchParams }) {
  const filters = readFilters(props.query);
  const [now, setNow] = useState(() => Date.now());
  const range = {
    type: 'APP_DDOS_ATTACK',
    configId: filters.proxy || undefined,
    from: new Date(now - filters.range.seconds * 1000).toISOString(),
    to: new Date(now).toISOString(),
  };
  const dashboard = useLoad(() => portal.dashboard(range), [filters.proxy, filters.range.key, now]);
  const summary = dashboard.data;
  const link = (changes: Record<string, string | undefined>) => withFilters(BASE, props.query, changes);
  const series = useMemo(
    () =>
      summary ? [{ label: 'Episodes', color: '#8b5cf6', values: summary.series.map((bucket) => bucket.blocked + bucket.logged) }] : [],
    [summary],
  );
  const starts = useMemo(() => summary?.series.map((bucket) => bucket.start) ?? [], [summary]);

  const [episodes, setEpisodes] = useState<EventResource[] | null>(null);
  const [selected, setSelected] = useState<EventResource | null>(null);
  const [error, setError] = useState<Error | null>(null);
  useEffect(() => {
    setEpisodes(null);
    portal
      .events({ ...range, sourceIp: filters.ip || undefined, countryCode: filters.country || undefined, size: '50' })
      .then((page) => setEpisodes(page.data), setError);
  }, [filters.proxy, filters.range.key, filters.ip, filters.country, now]);

  return (
    <div class="page">
      <PageHeader
        title="Rate limiting"
        subtitle={
          <>
            Clients that crossed a proxy's request threshold and were blocked: one episode per client and block period
            {summary && (
              <>
                {' '}
                · {formatTime(summary.range.from)} – {formatTime(summary.range.to)}
              </>
            )}
          </>
        }
      />
      <FilterBar base={BASE} query={props.query} filters={filters} onRefresh={() => setNow(Date.now())} />
      {dashboard.error && <Problem error={dashboard.error} />}
      {!summary && !dashboard.error && <Loading what="the dashboard" />}
      {summary && (
        <>
          <div class="stats">
            <Stat label="Episodes" value={summary.totals.events} tone="stat-violet" testid="total-episodes" />
            <Stat label="Sources blocked" value={summary.totals.distinctSourceIps} testid="total-sources" />
            <Stat
              label="Busiest source"
              value={summary.top.ip[0]?.key ?? '—'}
              testid="busiest-source"
              sub={summary.top.ip[0] ? `${formatNumber(summary.top.ip[0].events)} episodes` : undefined}
            />
          </div>
          <Card title="Episodes over time" class="chart-card">
            {summary.totals.events === 0 ? (
              <Empty>No rate-limit episodes in this range.</Empty>
            ) : (
              <TimeChart starts={starts} series={series} stepSeconds={summary.range.stepSeconds} testid="ddos-chart" />
            )}
          </Card>
          <div class="grid-2">
            <Card>
              <TopList
                title="Top sources"
                testid="top-sources"
                entries={summary.top.ip}
                link={(entry) => link({ ip: entry.key })}
                render={(entry) => <code>{entry.key}</code>}
              />
            </Card>
            <Card>
              <TopList
                title="Top countries"
                testid="top-countries"
                entries={summary.top.country}
                link={(entry) => link({ country: entry.key })}
                render={(entry) => (
                  <>
                    <CountryTag code={entry.key} /> {countryName(entry.key)}
                  </>
                )}
              />
            </Card>
          </div>
        </>
      )}
      <Card
        title="Episodes"
        data-testid="episode-list"
        actions={
          (filters.ip || filters.country) && (
            <Link to={link({ ip: undefined, country: undefined })} class="chip" title="Remove this filter">
              {filters.ip || countryName(filters.country)} ✕
            </Link>
          )
        }
      >
        {error && <Problem error={error} />}
        {!episodes && !error && <Loading what="episodes" />}
        {episodes && episodes.length === 0 && <Empty>No episodes match.</Empty>}
        {episodes && episodes.length > 0 && (
          <table class="table">
            <thead>
              <tr>
                <th>Started (UTC)</th>
                <th>Source</th>
                <th>Threshold crossed</th>
                <th class="right">Requests blocked</th>
                <th>Blocked until</th>
              </tr>
            </thead>
            <tbody>
              {episodes.map((episode) => {
                const attributes = episode.attributes;
                return (
                  <tr
                    class={`clickable ${selected?.id === episode.id ? 'selected' : ''}`}
                    onClick={() => setSelected(episode)}
                    data-event-id={episode.id}
                  >
                    <td class="nowrap small">{attributes.timestamp.replace('T', ' ').slice(0, 19)}</td>
                    <td class="nowrap">
                      <CountryTag code={attributes.source.countryCode} /> <code>{attributes.source.ip}</code>
                    </td>
                    <td class="small">
                      {attributes.rateLimit
                        ? `${formatNumber(attributes.rateLimit.observedRequests)} > ${formatNumber(attributes.rateLimit.threshold.requests)} requests / ${attributes.rateLimit.threshold.periodSeconds} s`
                        : '—'}
                    </td>
                    <td class="right">{attributes.rateLimit ? formatNumber(attributes.rateLimit.blockedRequests) : '—'}</td>
                    <td class="nowrap small">{attributes.rateLimit ? formatTime(attributes.rateLimit.blockedUntil) : '—'}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        )}
      </Card>
      {selected && (
        <div class="drawer" role="dialog" aria-label="Episode detail" data-testid="event-detail">
          <div class="drawer-head">
            <h2>Episode</h2>
            <button type="button" class="btn btn-small btn-ghost" onClick={() => setSelected(null)} title="Close">
              ✕
            </button>
          </div>
          <EventBody event={selected} />
        </div>
      )}
    </div>
  );
}
