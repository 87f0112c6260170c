/**
 * The WAF view: what the firewall blocked or logged, over time and by rule, source, country and
 * path; the events themselves; and one event in full, with the rules it matched and a way to turn
 * a false positive into a rule exclusion on its proxy.
 */
import { useEffect, useMemo, useState } from 'preact/hooks';
import { api, ApiFailure, portal, type EventResource } from '../api.ts';
import { FilterBar, readFilters, Stat, TimeChart, TopList, withFilters, type Filters } from '../components/dashboard.tsx';
import {
  Badge,
  Card,
  countryName,
  CountryTag,
  Empty,
  formatNumber,
  formatTime,
  Link,
  Loading,
  navigate,
  PageHeader,
  Problem,
  useLoad,
} from '../ui.tsx';

const BASE = '/waf';

function rangeQuery(filters: Filters, type: string, now: number) {
  return {
    type,
    configId: filters.proxy || undefined,
    from: new Date(now - filters.range.seconds * 1000).toISOString(),
    to: new Date(now).toISOString(),
  };
}

export function WafDashboardPage(props: { query: URLSearchParams; eventId?: string | undefined }) {
  const filters = readFilters(props.query);
  const [now, setNow] = useState(() => Date.now());
  const range = rangeQuery(filters, 'WAF_EVENT', now);
  const dashboard = useLoad(() => portal.dashboard(range), [filters.proxy, filters.range.key, now]);
  const summary = dashboard.data;
  const link = (changes: Record<string, string | undefined>) => withFilters(BASE, props.query, changes);

  const chartSeries = useMemo(
    () =>
      summary
        ? [
            { label: 'Blocked', color: '#ef4444', values: summary.series.map((bucket) => bucket.blocked) },
            { label: 'Logged', color: '#f59e0b', values: summary.series.map((bucket) => bucket.logged) },
          ]
        : [],
    [summary],
  );
  const starts = useMemo(() => summary?.series.map((bucket) => bucket.start) ?? [], [summary]);

  return (
    <div class="page">
      <PageHeader
        title="WAF events"
        subtitle={
          summary ? (
            <>
              Requests the web application firewall blocked or, in logging mode, would have blocked · {formatTime(summary.range.from)} –{' '}
              {formatTime(summary.range.to)}
            </>
          ) : (
            'Requests the web application firewall blocked or, in logging mode, would have blocked.'
          )
        }
      />
      <FilterBar base={BASE} query={props.query} filters={filters} onRefresh={() => setNow(Date.now())} />
      {dashboard.error && <Problem error={dashboard.error} />}
      {!summary && !dashboard.error && <Loading what="the dashboard" />}
      {summary && (
        <>
          <div class="stats">
            <Stat label="Events" value={summary.totals.events} testid="total-events" />
            <Stat label="Blocked" value={summary.totals.blocked} tone="stat-red" testid="total-blocked" />
            <Stat label="Logged only" value={summary.totals.logged} tone="stat-amber" testid="total-logged" />
            <Stat label="Source IPs" value={summary.totals.distinctSourceIps} testid="total-sources" />
          </div>
          <Card title="Events over time" class="chart-card">
            {summary.totals.events === 0 ? (
              <Empty>No WAF events in this range.</Empty>
            ) : (
              <TimeChart starts={starts} series={chartSeries} stepSeconds={summary.range.stepSeconds} testid="waf-chart" />
            )}
          </Card>
          <div class="grid-2">
            <Card>
              <TopList
                title="Top rules"
                testid="top-rules"
                entries={summary.top.rule}
                split
                link={(entry) => link({ rule: entry.key })}
                render={(entry) => (
                  <>
                    <code>{entry.key}</code> {entry.label}
                  </>
                )}
              />
            </Card>
            <Card>
              <TopList
                title="Top source IPs"
                testid="top-ips"
                entries={summary.top.ip}
                split
                link={(entry) => link({ ip: entry.key })}
                render={(entry) => <code>{entry.key}</code>}
              />
            </Card>
            <Card>
              <TopList
                title="Top countries"
                testid="top-countries"
                entries={summary.top.country}
                split
                link={(entry) => link({ country: entry.key })}
                render={(entry) => (
                  <>
                    <CountryTag code={entry.key} /> {countryName(entry.key)}
                  </>
                )}
              />
            </Card>
            <Card>
              <TopList
                title="Top paths"
                testid="top-paths"
                entries={summary.top.path}
                split
                link={(entry) => link({ path: entry.key })}
                render={(entry) => <code class="path">{entry.key}</code>}
              />
            </Card>
          </div>
          <div class="legend-note muted small">
            <span class="swatch swatch-blocked" /> blocked <span class="swatch swatch-logged" /> logged only
          </div>
        </>
      )}
      <EventList filters={filters} query={props.query} range={range} selected={props.eventId} />
      {props.eventId && <EventDetail id={props.eventId} query={props.query} />}
    </div>
  );
}

function EventList(props: {
  filters: Filters;
  query: URLSearchParams;
  range: ReturnType<typeof rangeQuery>;
  selected: string | undefined;
}) {
  const { filters } = props;
  const narrowing = {
    ruleId: filters.rule || undefined,
    sourceIp: filters.ip || undefined,
    countryCode: filters.country || undefined,
    path: filters.path || undefined,
  };
  const [pages, setPages] = useState<{ data: EventResource[]; next: string | null }[]>([]);
  const [error, setError] = useState<Error | null>(null);
  const key = JSON.stringify([props.range.configId, props.range.from.slice(0, 16), narrowing]);
  useEffect(() => {
    setPages([]);
    setError(null);
    portal.events({ ...props.range, ...narrowing, size: '25' }).then((page) => setPages([page]), setError);
  }, [key]);
  const more = pages.at(-1)?.next;
  const events = pages.flatMap((page) => page.data);
  const chips = [
    filters.rule && { key: 'rule', label: `rule ${filters.rule}` },
    filters.ip && { key: 'ip', label: `source ${filters.ip}` },
    filters.country && { key: 'country', label: countryName(filters.country) },
    filters.path && { key: 'path', label: `path ${filters.path}` },
  ].filter(Boolean) as { key: string; label: string }[];

  return (
    <Card
      title="Events"
      data-testid="event-list"
      actions={
        <div class="chips">
          {chips.map((chip) => (
            <Link to={withFilters(BASE, props.query, { [chip.key]: undefined })} class="chip" title="Remove this filter">
              {chip.label} ✕
            </Link>
          ))}
        </div>
      }
    >
      {error && <Problem error={error} />}
      {!pages.length && !error && <Loading what="events" />}
      {pages.length > 0 && events.length === 0 && <Empty>No events match.</Empty>}
      {events.length > 0 && (
        <table class="table table-events">
          <thead>
            <tr>
              <th>Time (UTC)</th>
              <th>Action</th>
              <th>Source</th>
              <th>Request</th>
              <th>Rules</th>
            </tr>
          </thead>
          <tbody>
            {events.map((event) => {
              const attributes = event.attributes;
              return (
                <tr
                  class={`clickable ${props.selected === event.id ? 'selected' : ''}`}
                  data-event-id={event.id}
                  onClick={() => navigate(withFilters(`${BASE}/events/${event.id}`, props.query, {}))}
                >
                  <td class="nowrap small">{attributes.timestamp.replace('T', ' ').slice(0, 19)}</td>
                  <td class="nowrap">
                    {attributes.action === 'BLOCKED' ? <Badge tone="red">blocked</Badge> : <Badge tone="amber">logged</Badge>}
                    {(attributes.requestCount ?? 1) > 1 && (
                      <span class="small" title="A sampled event: it stands for this many requests" data-testid="request-count">
                        {' '}
                        ×{formatNumber(attributes.requestCount!)}
                      </span>
                    )}
                  </td>
                  <td class="nowrap">
                    <CountryTag code={attributes.source.countryCode} /> <code>{attributes.source.ip}</code>
                  </td>
                  <td class="request-cell">
                    <span class="method">{attributes.request.method}</span> <code class="path">{attributes.request.path}</code>
                  </td>
                  <td class="small">{attributes.rules.map((rule) => rule.modSecId).join(', ')}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
      {more && (
        <button
          type="button"
          class="btn btn-small"
          onClick={() =>
            portal.events({ ...props.range, ...narrowing, size: '25', cursor: more }).then((page) => setPages([...pages, page]), setError)
          }
        >
          Load older events
        </button>
      )}
    </Card>
  );
}

function EventDetail(props: { id: string; query: URLSearchParams }) {
  const event = useLoad(() => portal.event(props.id), [props.id]);
  const close = () => navigate(withFilters(BASE, props.query, {}));
  return (
    <div class="drawer" role="dialog" aria-label="Event detail" data-testid="event-detail">
      <div class="drawer-head">
        <h2>Event</h2>
        <button type="button" class="btn btn-small btn-ghost" onClick={close} title="Close">
          ✕
        </button>
      </div>
      {event.error && <Problem error={event.error} />}
      {!event.data && !event.error && <Loading />}
      {event.data && <EventBody event={event.data.data} />}
    </div>
  );
}

export function EventBody(props: { event: EventResource }) {
  const { event } = props;
  const attributes = event.attributes;
  const [exclusionFor, setExclusionFor] = useState<number | null>(null);
  return (
    <div class="drawer-body">
      <dl class="facts">
        <dt>Action</dt>
        <dd>{attributes.action === 'BLOCKED' ? <Badge tone="red">blocked</Badge> : <Badge tone="amber">logged only</Badge>}</dd>
        <dt>Time</dt>
        <dd>{formatTime(attributes.timestamp)}</dd>
        {(attributes.requestCount ?? 1) > 1 && (
          <>
            <dt>Requests</dt>
            <dd>
              {formatNumber(attributes.requestCount!)}: a sample of the requests from this source that matched these rules in this minute,
              after the first ones stored whole
            </dd>
          </>
        )}
        <dt>Request</dt>
        <dd>
          <span class="method">{attributes.request.method}</span> <code class="path">{attributes.request.path}</code> →{' '}
          {attributes.request.statusCode}
        </dd>
        <dt>Source</dt>
        <dd>
          <CountryTag code={attributes.source.countryCode} /> <code>{attributes.source.ip}</code>:{attributes.source.port} (
          {countryName(attributes.source.countryCode)})
        </dd>
        <dt>Front end</dt>
        <dd>
          <code>{attributes.destinationIp}</code> · edge {attributes.tpc}
        </dd>
        <dt>Support id</dt>
        <dd>
          <code data-testid="support-id">{attributes.supportId}</code>
        </dd>
        <dt>Event id</dt>
        <dd>
          <code class="small">{event.id}</code>
        </dd>
      </dl>
      {attributes.rateLimit && (
        <>
          <h3>Rate limit episode</h3>
          <dl class="facts">
            <dt>Threshold</dt>
            <dd>
              {formatNumber(attributes.rateLimit.threshold.requests)} requests per {attributes.rateLimit.threshold.periodSeconds} s
              (observed {formatNumber(attributes.rateLimit.observedRequests)})
            </dd>
            <dt>Blocked</dt>
            <dd>
              {formatNumber(attributes.rateLimit.blockedRequests)} requests, {formatTime(attributes.rateLimit.firstBlockedAt)} –{' '}
              {formatTime(attributes.rateLimit.lastBlockedAt)}
            </dd>
            <dt>Blocked until</dt>
            <dd>{formatTime(attributes.rateLimit.blockedUntil)}</dd>
          </dl>
        </>
      )}
      {attributes.rules.length > 0 && (
        <>
          <h3>Matched rules</h3>
          <table class="table rules-table" data-testid="event-rules">
            <thead>
              <tr>
                <th>Rule</th>
                <th>Field</th>
                <th>Matched data</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {attributes.rules.map((rule, index) => (
                <tr>
                  <td>
                    <code>{rule.modSecId}</code>
                    <div class="small">{rule.name}</div>
                  </td>
                  <td class="small">
                    {rule.matchedVariable ? <code>{rule.matchedVariable}</code> : <span class="muted">not recorded</span>}
                  </td>
                  <td class="small">
                    {rule.matchedData.status === 'ENABLED' ? (
                      <code class="matched">{rule.matchedData.value ?? '(empty)'}</code>
                    ) : (
                      <span class="muted" title="Turn on waf.logMatchedData on the proxy to record it (it may contain secrets).">
                        not recorded (logMatchedData is off)
                      </span>
                    )}
                  </td>
                  <td class="right">
                    <button type="button" class="btn btn-small" onClick={() => setExclusionFor(index)}>
                      Exclude…
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          {exclusionFor !== null && attributes.rules[exclusionFor] && (
            <ExclusionForm key={exclusionFor} event={event} rule={attributes.rules[exclusionFor]!} onClose={() => setExclusionFor(null)} />
          )}
        </>
      )}
      <h3>Request headers</h3>
      <pre class="headers">{attributes.request.messageHeader}</pre>
    </div>
  );
}

/** The narrowest exclusion this event suggests (this rule, this path, the matched field), to widen by hand. */
function ExclusionForm(props: { event: EventResource; rule: EventResource['attributes']['rules'][number]; onClose: () => void }) {
  const configId = props.event.relationships.trafficConfig.data.id;
  const [pathPrefix, setPathPrefix] = useState(props.event.attributes.request.path.split('?')[0] ?? '/');
  const [target, setTarget] = useState(props.rule.matchedVariable ?? '');
  const [state, setState] = useState<{ busy?: boolean; error?: string; done?: boolean }>({});
  const save = async () => {
    setState({ busy: true });
    try {
      const proxy = (await api.proxy(configId)).data;
      const waf = (proxy.attributes.waf ?? {}) as { ruleExclusions?: unknown[] };
      const exclusion = { ruleIds: [props.rule.modSecId], ...(pathPrefix && { pathPrefix }), ...(target && { target }) };
      await api.patchProxy(configId, proxy.type, { waf: { ruleExclusions: [...(waf.ruleExclusions ?? []), exclusion] } });
      setState({ done: true });
    } catch (failure) {
      setState({ error: failure instanceof ApiFailure ? failure.errors.map((error) => error.detail).join('; ') : String(failure) });
    }
  };
  return (
    <div class="exclusion-form">
      <h4>
        Exclude rule <code>{props.rule.modSecId}</code> on this proxy
      </h4>
      <p class="small muted">
        Narrow by default: only this path prefix and, when known, only this request field. Widen it if the same false positive appears
        elsewhere.
      </p>
      <div class="row">
        <label class="field">
          <span>Path prefix</span>
          <input type="text" value={pathPrefix} onInput={(e) => setPathPrefix(e.currentTarget.value)} placeholder="all paths" />
        </label>
        <label class="field">
          <span>Request field</span>
          <input
            type="text"
            value={target}
            onInput={(e) => setTarget(e.currentTarget.value)}
            placeholder="ARGS:q, REQUEST_COOKIES:session (all fields when empty)"
          />
        </label>
      </div>
      {state.error && <div class="alert alert-error">{state.error}</div>}
      {state.done ? (
        <div class="alert alert-ok">
          Exclusion added: it applies with the proxy's next version (status on <Link to={`/proxies/${configId}`}>the proxy</Link>).
        </div>
      ) : (
        <div class="buttons">
          <button type="button" class="btn btn-primary btn-small" disabled={state.busy} onClick={save}>
            Add exclusion to the proxy
          </button>{' '}
          <button type="button" class="btn btn-small" onClick={props.onClose}>
            Cancel
          </button>
        </div>
      )}
    </div>
  );
}
