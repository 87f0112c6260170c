import { useEffect } from 'preact/hooks';
import { api, type ProxyAttributes, type Resource } from '../api.ts';
import { Badge, Card, Empty, formatTime, Link, Loading, PageHeader, Problem, StatusBadge, useLoad } from '../ui.tsx';

export function frontendOf(attributes: ProxyAttributes): string {
  const { ipv4, ipv6, port } = attributes.frontend;
  return [ipv4 && `${ipv4}:${port}`, ipv6 && `[${ipv6}]:${port}`].filter(Boolean).join(', ');
}

export function proxyLabel(proxy: Resource<ProxyAttributes>): string {
  return `${proxy.type === 'httpProxy' ? 'HTTP' : 'L4'} ${frontendOf(proxy.attributes)} → ${proxy.attributes.backend.hosts
    .map((host) => `${host.address}:${host.port}`)
    .join(', ')}`;
}

export function ProxiesPage() {
  const proxies = useLoad(() => api.proxies(), []);
  // Status changes by itself (PROVISIONING -> ACTIVE): poll while any proxy is not settled.
  const settling = proxies.data?.data.some((proxy) => proxy.attributes.status === 'PROVISIONING');
  useEffect(() => {
    if (!settling) return;
    const timer = setTimeout(proxies.reload, 1500);
    return () => clearTimeout(timer);
  }, [proxies.data]);

  return (
    <div class="page">
      <PageHeader
        title="Proxies"
        subtitle="HTTP proxies (TLS, WAF, rate limiting, geo fencing) and layer 4 proxies (TCP/UDP) in front of your assets."
        actions={
          <Link to="/proxies/new" class="btn btn-primary" data-testid="new-proxy">
            New proxy
          </Link>
        }
      />
      <Card>
        {proxies.error && <Problem error={proxies.error} />}
        {!proxies.data && !proxies.error && <Loading />}
        {proxies.data && proxies.data.data.length === 0 && (
          <Empty>
            No proxies yet. <Link to="/proxies/new">Create the first one</Link>.
          </Empty>
        )}
        {proxies.data && proxies.data.data.length > 0 && (
          <table class="table" data-testid="proxies">
            <thead>
              <tr>
                <th>Kind</th>
                <th>Front end</th>
                <th>Origins</th>
                <th>Protection</th>
                <th>Status</th>
                <th>Updated</th>
              </tr>
            </thead>
            <tbody>
              {proxies.data.data.map((proxy) => {
                const attributes = proxy.attributes as ProxyAttributes & {
                  waf?: { mode: string; paranoiaLevel: number };
                  rateLimiting?: unknown;
                  geoFencing?: { mode: string } | null;
                  protocols?: string[];
                  threatIntelligence?: { enabled: boolean };
                };
                return (
                  <tr data-proxy-id={proxy.id}>
                    <td>
                      <Badge tone={proxy.type === 'httpProxy' ? 'blue' : 'gray'}>
                        {proxy.type === 'httpProxy' ? 'HTTP' : `L4 ${(attributes.protocols ?? ['TCP']).join('+')}`}
                      </Badge>
                    </td>
                    <td>
                      <Link to={`/proxies/${proxy.id}`} class="strong">
                        {frontendOf(attributes)}
                      </Link>
                      {proxy.type === 'httpProxy' && (
                        <span class="muted small"> {attributes.frontend.certificateId ? '· TLS' : '· plain HTTP'}</span>
                      )}
                    </td>
                    <td class="mono small">{attributes.backend.hosts.map((host) => `${host.address}:${host.port}`).join(', ')}</td>
                    <td class="small">
                      {proxy.type === 'httpProxy' ? (
                        <>
                          WAF {attributes.waf?.mode?.toLowerCase() ?? 'blocking'} (PL{attributes.waf?.paranoiaLevel ?? 1})
                          {attributes.rateLimiting ? ' · rate limit' : ''}
                          {attributes.geoFencing
                            ? ` · geo ${attributes.geoFencing.mode === 'ALLOW_LISTED' ? 'allow list' : 'block list'}`
                            : ''}
                        </>
                      ) : attributes.threatIntelligence?.enabled === false ? (
                        'threat feed off'
                      ) : (
                        'threat feed'
                      )}
                    </td>
                    <td data-testid="proxy-status">
                      <StatusBadge status={attributes.status} detail={attributes.statusDetail} />
                      {attributes.status === 'ERROR' && attributes.statusDetail && (
                        <div class="small error-text">{attributes.statusDetail}</div>
                      )}
                    </td>
                    <td class="nowrap small">{formatTime(attributes.updatedAt)}</td>
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
