/** Distributed application-layer attacks on the tenant's HTTP proxies (GET /api/v2/insight/ddos-attacks), newest first, with how to switch the protection on. */
import { api, type DdosAttackAttributes } from '../api.ts';
import { Badge, Card, Empty, formatTime, Link, Loading, PageHeader, Problem, useLoad } from '../ui.tsx';

function duration(from: string, to: string): string {
  const seconds = Math.max(0, Math.round((Date.parse(to) - Date.parse(from)) / 1000));
  return seconds < 120 ? `${seconds} s` : `${Math.round(seconds / 60)} min`;
}

export function DdosAttacksPage() {
  const attacks = useLoad(() => api.ddosAttacks(), []);
  const rows = [...(attacks.data?.data ?? [])].reverse();
  return (
    <div class="page">
      <PageHeader
        title="DDoS attacks"
        subtitle="Floods from many sources at once on an HTTP proxy, detected and answered with a browser check."
        actions={
          <button type="button" class="btn btn-ghost" onClick={attacks.reload}>
            Refresh
          </button>
        }
      />
      <Card title="How it works">
        <div class="small" data-testid="ddos-help">
          <p>
            Switch it on per HTTP proxy with its <code>appDdos</code> attributes (API, or <code>tps apply</code>):{' '}
            <code>{'"appDdos": { "mode": "AUTO" }'}</code>. The proxy learns its normal request rate; when requests exceed it several times
            over (or pass your <code>threshold</code> per second), visitors without a clearance see a short "Checking your browser" page
            that solves a puzzle in about a second and loads the page they asked for. Their browser then keeps a cookie for 30 minutes.{' '}
            <code>ALWAYS</code> checks every visitor, attack or not.
          </p>
          <p>
            Scripts and API clients cannot solve the check: exempt them with <code>exemptions.pathPrefixes</code> (such as{' '}
            <code>/api/</code>), <code>exemptions.userAgents</code> or <code>exemptions.sourceNetworks</code>. They stay under your rate
            limit, and <code>originRateLimit</code> caps what reaches your origin per second during an attack. A source that keeps ignoring
            the check is blocked like a rate-limit block.
          </p>
        </div>
      </Card>
      <Card>
        {attacks.error && <Problem error={attacks.error} />}
        {!attacks.data && !attacks.error && <Loading />}
        {attacks.data && rows.length === 0 && <Empty>No attack recorded. An attack is listed here once it has ended.</Empty>}
        {rows.length > 0 && (
          <table class="table" data-testid="ddos-attacks">
            <thead>
              <tr>
                <th>Started</th>
                <th>Lasted</th>
                <th>Proxy</th>
                <th>Peak / trigger (req/s)</th>
                <th>Sources</th>
                <th>Requests</th>
                <th>Challenged</th>
                <th>Solved</th>
                <th>Passed</th>
                <th>Blocked</th>
                <th>Shed</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((attack) => {
                const a: DdosAttackAttributes = attack.attributes;
                const proxyId = (attack.relationships as { trafficConfig: { data: { id: string } } }).trafficConfig.data.id;
                return (
                  <tr data-attack-id={attack.id}>
                    <td class="nowrap small">
                      {formatTime(a.startedAt)} {a.mode === 'ALWAYS' && <Badge tone="gray">always</Badge>}
                    </td>
                    <td class="small">{duration(a.startedAt, a.endedAt)}</td>
                    <td class="mono small">
                      <Link to={`/proxies/${proxyId}`}>{proxyId.slice(0, 8)}</Link>
                    </td>
                    <td class="small">
                      {a.peakRate} / {a.triggerRate}
                    </td>
                    <td class="small">{a.sources}</td>
                    <td class="small">{a.requests}</td>
                    <td class="small">{a.challenged}</td>
                    <td class="small">{a.solved}</td>
                    <td class="small">{a.passed}</td>
                    <td class="small">{a.blocked}</td>
                    <td class="small">{a.shed}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        )}
      </Card>
    </div>
  );
}
