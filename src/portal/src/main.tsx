/**
 * The portal: a Preact single-page app served by `tps serve` under /portal. Preact (4 kB, the
 * React API) keeps the page small and fast; uPlot draws the time series; the styles are our own
 * (src/styles.css), with no framework to download.
 */
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import 'uplot/dist/uPlot.min.css';
import './styles.css';
import { portal, setCsrfToken, whenSignedOut, type SessionInfo } from './api.ts';
import { Link, Loading, navigate, Session, useRoute, type SessionState } from './ui.tsx';
import { LoginPage } from './pages/login.tsx';
import { ProxiesPage } from './pages/proxies.tsx';
import { ProxyFormPage } from './pages/proxy-form.tsx';
import { CertificatesPage } from './pages/certificates.tsx';
import { CaCertificatesPage } from './pages/ca-certificates.tsx';
import { ServiceAccountsPage } from './pages/service-accounts.tsx';
import { WafDashboardPage } from './pages/waf-dashboard.tsx';
import { RateLimitDashboardPage } from './pages/rate-limit-dashboard.tsx';
import { DdosAttacksPage } from './pages/ddos-attacks.tsx';

// Icons: SVG path data (24x24, stroked), so that no icon font or emoji font is needed.
const NAV = [
  { to: '/waf', label: 'WAF events', icon: 'M12 3 4 6v6c0 5 3.4 8.4 8 9.5 4.6-1.1 8-4.5 8-9.5V6z' },
  { to: '/rate-limiting', label: 'Rate limiting', icon: 'M12 21a8 8 0 1 0 0-16 8 8 0 0 0 0 16zM12 9v4l3 2M9 2h6' },
  { to: '/ddos-attacks', label: 'DDoS attacks', icon: 'M3 12h4l3-8 4 16 3-8h4' },
  { to: '/proxies', label: 'Proxies', icon: 'M4 8h13l-3-3M20 16H7l3 3' },
  { to: '/certificates', label: 'Certificates', icon: 'M6 11h12v10H6zM8 11V7a4 4 0 0 1 8 0v4' },
  { to: '/ca-certificates', label: 'CA certificates', icon: 'M3 10 12 4l9 6M5 10v9M19 10v9M9 10v9M15 10v9M3 21h18' },
  { to: '/service-accounts', label: 'Service accounts', icon: 'M15 7a4 4 0 1 1-3.9 5H4v3h3v-2h2v2h2.1A4 4 0 0 1 15 7z' },
];

function App() {
  const route = useRoute();
  const [session, setSession] = useState<SessionState | null | undefined>(undefined);

  const signedIn = (info: SessionInfo) => {
    setCsrfToken(info.csrfToken);
    setSession(info.user);
  };

  useEffect(() => {
    whenSignedOut(() => {
      setSession(null);
      setCsrfToken('');
    });
    portal.session().then(signedIn, () => setSession(null));
  }, []);

  if (session === undefined) return <Loading />;
  if (session === null) {
    return (
      <LoginPage
        onSignedIn={(info) => {
          signedIn(info);
          // A deep link (say /portal/proxies/ID) opens where it pointed once signed in.
          if (route.path === '/' || route.path === '/login') navigate('/waf', true);
        }}
      />
    );
  }
  if (route.path === '/' || route.path === '/login') {
    queueMicrotask(() => navigate('/waf', true));
    return <Loading />;
  }

  return (
    <Session.Provider value={session}>
      <div class="shell">
        <aside class="sidebar">
          <div class="sidebar-inner">
            <div class="brand">
              <svg viewBox="0 0 32 32" width="26" height="26" aria-hidden="true">
                <path d="M16 2 4 7v8c0 7.5 5.1 13.4 12 15 6.9-1.6 12-7.5 12-15V7z" fill="#f97316" />
                <path d="m10.5 16 4 4 7-8" stroke="#fff" stroke-width="2.6" fill="none" stroke-linecap="round" stroke-linejoin="round" />
              </svg>
              <span>Traffic protection</span>
            </div>
            <nav>
              {NAV.map((item) => (
                <Link to={item.to} class={route.path.startsWith(item.to) ? 'active' : ''} data-testid={`nav ${item.label}`}>
                  <svg class="icon" viewBox="0 0 24 24" width="18" height="18" aria-hidden="true">
                    <path
                      d={item.icon}
                      fill="none"
                      stroke="currentColor"
                      stroke-width="1.8"
                      stroke-linecap="round"
                      stroke-linejoin="round"
                    />
                  </svg>
                  {item.label}
                </Link>
              ))}
            </nav>
            <div class="account">
              <div class="tenant" title={session.tenantId}>
                {session.tenantName || 'Tenant'}
              </div>
              <div class="email" data-testid="signed-in-as">
                {session.email}
              </div>
              <button
                type="button"
                class="btn btn-ghost btn-small"
                onClick={async () => {
                  await portal.logout().catch(() => undefined);
                  setCsrfToken('');
                  setSession(null);
                  navigate('/login', true);
                }}
              >
                Sign out
              </button>
            </div>
          </div>
        </aside>
        <main class="content">
          <Page path={route.path} query={route.query} />
        </main>
      </div>
    </Session.Provider>
  );
}

function Page(props: { path: string; query: URLSearchParams }) {
  const { path, query } = props;
  if (path === '/waf' || path.startsWith('/waf/')) return <WafDashboardPage query={query} eventId={path.split('/')[3]} />;
  if (path === '/rate-limiting') return <RateLimitDashboardPage query={query} />;
  if (path === '/ddos-attacks') return <DdosAttacksPage />;
  if (path === '/proxies') return <ProxiesPage />;
  if (path === '/proxies/new') return <ProxyFormPage />;
  if (path.startsWith('/proxies/')) return <ProxyFormPage id={path.split('/')[2]} />;
  if (path === '/certificates') return <CertificatesPage />;
  if (path === '/ca-certificates') return <CaCertificatesPage />;
  if (path === '/service-accounts') return <ServiceAccountsPage />;
  return (
    <div class="empty">
      No page here. <Link to="/waf">Go to the WAF events</Link>
    </div>
  );
}

render(<App />, document.getElementById('app')!);
