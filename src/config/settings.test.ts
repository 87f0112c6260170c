import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import os from 'node:os';
import { WafInputLimits } from '@tps/model';
import { DEFAULT_EXPENSIVE_CLIENT_SHARE, DEFAULT_INPUT_LIMITS, DEFAULT_REQUEST_BUDGET_MS, INPUT_LIMIT_BOUNDS } from '@tps/waf';
import { loadApiClientSettings, loadSettings, SettingsError } from './settings.ts';

/** Settings from these variables only (never the environment of the test run). */
const load = (env: Record<string, string>, flags: Parameters<typeof loadSettings>[0] = {}) =>
  loadSettings(flags, { TPS_ACME_DIRECTORY_URL: 'off', ...env });

describe('settings: load balancers in front of the edge', () => {
  it('trusts nobody and reads no PROXY header by default', () => {
    const settings = load({});
    assert.deepEqual(settings.trustedProxies, []);
    assert.equal(settings.listenerProxyProtocol, 'off');
  });

  it('reads a comma list of IPv4/IPv6 CIDRs and addresses; a flag overrides the variable', () => {
    const settings = load({ TPS_TRUSTED_PROXIES: ' 10.0.0.0/8, 2001:db8::/32 ,192.0.2.7,', TPS_LISTENER_PROXY_PROTOCOL: 'optional' });
    assert.deepEqual(settings.trustedProxies, ['10.0.0.0/8', '2001:db8::/32', '192.0.2.7']);
    assert.equal(settings.listenerProxyProtocol, 'optional');
    const flagged = load({ TPS_TRUSTED_PROXIES: '10.0.0.0/8' }, { trustedProxies: '172.16.0.0/12', listenerProxyProtocol: 'required' });
    assert.deepEqual(flagged.trustedProxies, ['172.16.0.0/12']);
    assert.equal(flagged.listenerProxyProtocol, 'required');
  });

  it('stops at start on an invalid CIDR, naming the setting and the entry', () => {
    assert.throws(
      () => load({ TPS_TRUSTED_PROXIES: '10.0.0.0/8,10.0.0.0/33,lb.example.com' }),
      (error: Error) =>
        error instanceof SettingsError &&
        /TPS_TRUSTED_PROXIES \(--trusted-proxies\): .*"10\.0\.0\.0\/33", "lb\.example\.com"/.test(error.message),
    );
  });

  it('refuses an unknown PROXY protocol mode, and a mode without trusted networks', () => {
    assert.throws(
      () => load({ TPS_TRUSTED_PROXIES: '10.0.0.0/8', TPS_LISTENER_PROXY_PROTOCOL: 'on' }),
      /TPS_LISTENER_PROXY_PROTOCOL .*off, optional or required/,
    );
    assert.throws(() => load({ TPS_LISTENER_PROXY_PROTOCOL: 'required' }), /TPS_LISTENER_PROXY_PROTOCOL .*needs TPS_TRUSTED_PROXIES/);
  });
});

describe('settings: reverse proxies in front of the API', () => {
  it('trusts no forwarding header by default, and reads a comma list of CIDRs', () => {
    assert.deepEqual(load({}).apiTrustedProxies, []);
    assert.deepEqual(load({ TPS_API_TRUSTED_PROXIES: '127.0.0.1, ::1,10.0.0.0/8' }).apiTrustedProxies, ['127.0.0.1', '::1', '10.0.0.0/8']);
    assert.throws(
      () => load({ TPS_API_TRUSTED_PROXIES: 'proxy.example.com' }),
      /TPS_API_TRUSTED_PROXIES \(--api-trusted-proxies\): .*"proxy\.example\.com"/,
    );
  });
});

describe('settings: errors', () => {
  it('name the environment variable, and the flag only where the CLI has one', () => {
    assert.throws(
      () => load({ TPS_WAF_THREADS: 'many' }),
      (error: Error) => error instanceof SettingsError && /TPS_WAF_THREADS: must be an integer/.test(error.message),
    );
    assert.throws(
      () => load({ TPS_LOCATION: 'frankfurt' }),
      (error: Error) => error instanceof SettingsError && /TPS_LOCATION \(--location\): /.test(error.message),
    );
  });
});

describe("settings: the service's own listeners", () => {
  it('serves /metrics and /healthz on 127.0.0.1:9464 unless told otherwise', () => {
    assert.deepEqual(load({}).metricsListen, { host: '127.0.0.1', port: 9464 });
    assert.deepEqual(load({ TPS_METRICS_LISTEN: '[::1]:9000' }).metricsListen, { host: '::1', port: 9000 });
  });

  it('refuses an API or metrics listener on a front-end IP or on every address, naming the variable', () => {
    const frontend = { TPS_FRONTEND_IPS: '127.0.0.2,::1' };
    assert.throws(() => load({ ...frontend, TPS_API_LISTEN: '127.0.0.2:8080' }), /TPS_API_LISTEN .*front-end IP/);
    assert.throws(() => load({ ...frontend, TPS_METRICS_LISTEN: '[::1]:9464' }), /TPS_METRICS_LISTEN .*front-end IP/);
    assert.throws(() => load({ TPS_API_LISTEN: '0.0.0.0:8080' }), /TPS_API_LISTEN .*every address/);
    assert.throws(() => load({ TPS_METRICS_LISTEN: '[::]:9464' }), /TPS_METRICS_LISTEN .*every address/);
    assert.throws(() => load({ TPS_METRICS_LISTEN: 'localhost:9464' }), /TPS_METRICS_LISTEN .*ip:port/);
  });
});

describe('settings: the API client of tps apply and tps export', () => {
  const credentials = { TPS_CLIENT_ID: 'id', TPS_CLIENT_SECRET: 'secret' };

  it('calls the service on this host unless told otherwise; the audience and issuer follow TPS_BASE_URL and TPS_AUTH_URL', () => {
    assert.deepEqual(loadApiClientSettings({}, credentials), {
      apiUrl: 'http://127.0.0.1:8080',
      authUrl: 'http://127.0.0.1:8080',
      audience: 'http://127.0.0.1:8080',
      clientId: 'id',
      clientSecret: 'secret',
    });
    const behindProxy = loadApiClientSettings(
      {},
      { ...credentials, TPS_API_LISTEN: '127.0.0.1:9000', TPS_BASE_URL: 'https://tps.example.com/' },
    );
    assert.equal(behindProxy.apiUrl, 'http://127.0.0.1:9000');
    assert.equal(behindProxy.audience, 'https://tps.example.com');
    const flagged = loadApiClientSettings(
      { apiUrl: 'https://api.example.com', clientId: 'other' },
      { ...credentials, TPS_API_URL: 'http://ignored' },
    );
    assert.equal(flagged.apiUrl, 'https://api.example.com');
    assert.equal(flagged.clientId, 'other');
  });

  it('needs a client id and secret, and an http(s) URL, naming the variable and the flag', () => {
    assert.throws(
      () => loadApiClientSettings({}, {}),
      (error: Error) => error instanceof SettingsError && /^TPS_CLIENT_ID \(--client-id\): is required/.test(error.message),
    );
    assert.throws(() => loadApiClientSettings({}, { TPS_CLIENT_ID: 'id' }), /TPS_CLIENT_SECRET \(--client-secret\): is required/);
    assert.throws(
      () => loadApiClientSettings({}, { ...credentials, TPS_API_URL: 'ftp://x' }),
      /TPS_API_URL \(--api-url\): must be an http\(s\) URL/,
    );
  });
});

describe('settings: CRL fetches at a time', () => {
  it('defaults to 16 in all and 2 per tenant', () => {
    assert.deepEqual([load({}).crlFetches, load({}).crlFetchesPerTenant], [16, 2]);
    const set = load({ TPS_CRL_FETCHES: '8', TPS_CRL_FETCHES_PER_TENANT: '1' });
    assert.deepEqual([set.crlFetches, set.crlFetchesPerTenant], [8, 1]);
    assert.throws(() => load({ TPS_CRL_FETCHES_PER_TENANT: '0' }), /TPS_CRL_FETCHES_PER_TENANT/);
  });
});

describe('settings: how long a pending service-issued order claims its names', () => {
  it('defaults to a day, and takes seconds from 1 to 30 days', () => {
    assert.equal(load({}).acmeClaimSeconds, 86_400);
    assert.equal(load({ TPS_ACME_CLAIM_SECONDS: '2' }).acmeClaimSeconds, 2);
    assert.throws(() => load({ TPS_ACME_CLAIM_SECONDS: '0' }), /TPS_ACME_CLAIM_SECONDS/);
  });
});

describe('settings: quota of pending service-issued certificate orders', () => {
  it('defaults to 10 a tenant, and takes an integer from 1', () => {
    assert.equal(load({}).quotaPendingAcmeOrders, 10);
    assert.equal(load({ TPS_QUOTA_PENDING_ACME_ORDERS: '3' }).quotaPendingAcmeOrders, 3);
  });

  it('stops at start on a value that is not a positive integer, naming the variable', () => {
    for (const value of ['0', '-1', 'many', '2.5']) {
      assert.throws(
        () => load({ TPS_QUOTA_PENDING_ACME_ORDERS: value }),
        (error: Error) =>
          error instanceof SettingsError && /^TPS_QUOTA_PENDING_ACME_ORDERS: must be an integer from 1 to 10000/.test(error.message),
        value,
      );
    }
  });
});

describe('settings: per-tenant quotas', () => {
  it('default to 100 proxies, 100 certificates and 50 CA certificates', () => {
    const settings = load({});
    assert.equal(settings.quotaProxies, 100);
    assert.equal(settings.quotaCertificates, 100);
    assert.equal(settings.quotaCaCertificates, 50);
  });

  it('take integers from 0 (no new resource at all) up, and stop the start on anything else', () => {
    const settings = load({ TPS_QUOTA_PROXIES: '0', TPS_QUOTA_CERTIFICATES: '5000', TPS_QUOTA_CA_CERTIFICATES: '3' });
    assert.deepEqual([settings.quotaProxies, settings.quotaCertificates, settings.quotaCaCertificates], [0, 5000, 3]);
    assert.throws(() => load({ TPS_QUOTA_PROXIES: '-1' }), /TPS_QUOTA_PROXIES: must be an integer from 0/);
    assert.throws(() => load({ TPS_QUOTA_CERTIFICATES: 'lots' }), /TPS_QUOTA_CERTIFICATES: must be an integer/);
    assert.throws(() => load({ TPS_QUOTA_CA_CERTIFICATES: '1.5' }), /TPS_QUOTA_CA_CERTIFICATES: must be an integer/);
  });
});

describe('settings: the origin policy', () => {
  it('allows no special-purpose network and uses the system resolver by default', () => {
    const settings = load({});
    assert.deepEqual(settings.originAllowedNetworks, []);
    assert.deepEqual(settings.originResolver, []);
  });

  it('reads comma lists of networks and of DNS servers', () => {
    const settings = load({
      TPS_ORIGIN_ALLOWED_NETWORKS: ' 10.0.0.0/8, fd00::/8 ,192.168.1.7',
      TPS_ORIGIN_RESOLVER: '127.0.0.53, 10.0.0.2:5353,[::1]:53',
    });
    assert.deepEqual(settings.originAllowedNetworks, ['10.0.0.0/8', 'fd00::/8', '192.168.1.7']);
    assert.deepEqual(settings.originResolver, ['127.0.0.53', '10.0.0.2:5353', '[::1]:53']);
  });

  it('stops at start on a bad network or DNS server, naming the variable and the entry', () => {
    assert.throws(
      () => load({ TPS_ORIGIN_ALLOWED_NETWORKS: '10.0.0.0/8,10.0.0.0/40,intranet' }),
      (error: Error) =>
        error instanceof SettingsError && /TPS_ORIGIN_ALLOWED_NETWORKS: .*"10\.0\.0\.0\/40", "intranet"/.test(error.message),
    );
    assert.throws(
      () => load({ TPS_ORIGIN_RESOLVER: 'dns.example,1.2.3.4:99999' }),
      (error: Error) => error instanceof SettingsError && /TPS_ORIGIN_RESOLVER: .*"dns\.example", "1\.2\.3\.4:99999"/.test(error.message),
    );
  });
});

describe('settings: CRL fetches', () => {
  it('reads a CRL of 1 MiB at most, within 10 s, unless told otherwise', () => {
    assert.equal(load({}).crlMaxBytes, 1024 * 1024);
    assert.equal(load({}).crlFetchTimeoutSeconds, 10);
    assert.equal(load({ TPS_CRL_MAX_BYTES: '65536', TPS_CRL_FETCH_TIMEOUT_SECONDS: '3' }).crlMaxBytes, 65536);
    assert.throws(() => load({ TPS_CRL_MAX_BYTES: '20MiB' }), /TPS_CRL_MAX_BYTES: must be an integer/);
    assert.throws(() => load({ TPS_CRL_FETCH_TIMEOUT_SECONDS: '0' }), /TPS_CRL_FETCH_TIMEOUT_SECONDS: must be an integer from 1/);
  });
});

describe('settings: hostile traffic bounds', () => {
  it('has defaults for the HTTP connection caps, IPv6 prefixes, counters, UDP budget, password hashes and the unauthenticated API limit', () => {
    const settings = load({});
    assert.equal(settings.httpMaxConnectionsPerSource, 256);
    assert.equal(settings.httpMaxNewConnectionsPerSecondPerSource, 100);
    assert.equal(settings.httpMaxConnections, 10_000);
    assert.equal(settings.rateLimitIpv6Prefix, 64);
    assert.equal(settings.rateLimitClientsPerProxy, 16_384);
    assert.equal(settings.udpReplyBudgetFactor, 3);
    assert.equal(settings.udpMaxUnconfirmedSessions, 1000);
    assert.equal(settings.passwordHashConcurrency, 2);
    assert.equal(settings.apiUnauthenticatedRateLimitPerMinute, 300);
    assert.equal(settings.kernelBlocking, 'auto');
    assert.equal(settings.kernelBlockingEscalationFactor, 4);
  });

  it('reads kernel blocking and refuses a mode it does not know', () => {
    const settings = load({ TPS_KERNEL_BLOCKING: 'nftables', TPS_KERNEL_BLOCKING_ESCALATION_FACTOR: '8' });
    assert.deepEqual([settings.kernelBlocking, settings.kernelBlockingEscalationFactor], ['nftables', 8]);
    assert.equal(load({ TPS_KERNEL_BLOCKING: 'off' }).kernelBlocking, 'off');
    assert.throws(() => load({ TPS_KERNEL_BLOCKING: 'iptables' }), /TPS_KERNEL_BLOCKING: must be auto, nftables or off, got "iptables"/);
    assert.throws(
      () => load({ TPS_KERNEL_BLOCKING_ESCALATION_FACTOR: '0' }),
      /TPS_KERNEL_BLOCKING_ESCALATION_FACTOR: must be an integer from 1/,
    );
  });

  it("reads who answers blocked sources' repeats, the native engine by default", () => {
    assert.equal(load({}).earlyRefusalEngine, 'auto');
    assert.equal(load({ TPS_EARLY_REFUSAL_ENGINE: 'javascript' }).earlyRefusalEngine, 'javascript');
    assert.throws(() => load({ TPS_EARLY_REFUSAL_ENGINE: 'native' }), /TPS_EARLY_REFUSAL_ENGINE: must be auto or javascript, got "native"/);
    assert.equal(load({}).http1FrontEnd, 'handles');
    assert.equal(load({ TPS_HTTP1_FRONT_END: 'node' }).http1FrontEnd, 'node');
    assert.throws(() => load({ TPS_HTTP1_FRONT_END: 'fast' }), /TPS_HTTP1_FRONT_END: must be handles or node, got "fast"/);
  });

  it("reads the rate limit's failure mode while Redis does not answer, local by default", () => {
    const defaults = load({});
    assert.deepEqual([defaults.rateLimitStoreFailureMode, defaults.rateLimitStoreTimeoutMs], ['local', 250]);
    const settings = load({ TPS_RATE_LIMIT_STORE_FAILURE_MODE: 'closed', TPS_RATE_LIMIT_STORE_TIMEOUT_MS: '50' });
    assert.deepEqual([settings.rateLimitStoreFailureMode, settings.rateLimitStoreTimeoutMs], ['closed', 50]);
    assert.equal(load({ TPS_RATE_LIMIT_STORE_FAILURE_MODE: 'open' }).rateLimitStoreFailureMode, 'open');
    assert.throws(
      () => load({ TPS_RATE_LIMIT_STORE_FAILURE_MODE: 'deny' }),
      /TPS_RATE_LIMIT_STORE_FAILURE_MODE: must be local, closed or open, got "deny"/,
    );
    assert.throws(() => load({ TPS_RATE_LIMIT_STORE_TIMEOUT_MS: '0' }), /TPS_RATE_LIMIT_STORE_TIMEOUT_MS: must be an integer from 1/);
  });

  it('reads each from its variable', () => {
    const settings = load({
      TPS_HTTP_MAX_CONNECTIONS_PER_SOURCE: '4',
      TPS_HTTP_MAX_NEW_CONNECTIONS_PER_SECOND_PER_SOURCE: '5',
      TPS_HTTP_MAX_CONNECTIONS: '6',
      TPS_RATE_LIMIT_IPV6_PREFIX: '56',
      TPS_RATE_LIMIT_CLIENTS_PER_PROXY: '1024',
      TPS_UDP_REPLY_BUDGET_FACTOR: '10',
      TPS_UDP_MAX_UNCONFIRMED_SESSIONS: '50',
      TPS_PASSWORD_HASH_CONCURRENCY: '1',
      TPS_API_UNAUTHENTICATED_RATE_LIMIT_PER_MINUTE: '60',
    });
    assert.deepEqual(
      [
        settings.httpMaxConnectionsPerSource,
        settings.httpMaxNewConnectionsPerSecondPerSource,
        settings.httpMaxConnections,
        settings.rateLimitIpv6Prefix,
        settings.rateLimitClientsPerProxy,
        settings.udpReplyBudgetFactor,
        settings.udpMaxUnconfirmedSessions,
        settings.passwordHashConcurrency,
        settings.apiUnauthenticatedRateLimitPerMinute,
      ],
      [4, 5, 6, 56, 1024, 10, 50, 1, 60],
    );
  });

  it('stops at start on a value out of range, naming the variable', () => {
    assert.throws(() => load({ TPS_RATE_LIMIT_IPV6_PREFIX: '129' }), /TPS_RATE_LIMIT_IPV6_PREFIX: must be an integer from 1 to 128/);
    assert.throws(() => load({ TPS_HTTP_MAX_CONNECTIONS: '0' }), /TPS_HTTP_MAX_CONNECTIONS: must be an integer/);
    assert.throws(() => load({ TPS_UDP_REPLY_BUDGET_FACTOR: 'lots' }), /TPS_UDP_REPLY_BUDGET_FACTOR: must be an integer/);
    assert.throws(() => load({ TPS_PASSWORD_HASH_CONCURRENCY: '0' }), /TPS_PASSWORD_HASH_CONCURRENCY: must be an integer/);
    assert.throws(() => load({ TPS_RATE_LIMIT_CLIENTS_PER_PROXY: '10' }), /TPS_RATE_LIMIT_CLIENTS_PER_PROXY: must be an integer from 64/);
  });
});

describe('settings: insight under a flood', () => {
  it('keeps 30 days, 1 GiB, half of it per tenant and 10 whole events per group and minute by default', () => {
    const settings = load({});
    assert.equal(settings.insightRetentionDays, 30);
    assert.equal(settings.insightMaxBytes, 1024 ** 3);
    assert.equal(settings.insightTenantSharePercent, 50);
    assert.equal(settings.insightWholeEventsPerMinute, 10);
  });

  it('reads bytes plain or with a k, m or g suffix', () => {
    assert.equal(load({ TPS_INSIGHT_MAX_BYTES: '5000000' }).insightMaxBytes, 5_000_000);
    assert.equal(load({ TPS_INSIGHT_MAX_BYTES: '512m' }).insightMaxBytes, 512 * 1024 ** 2);
    assert.equal(load({ TPS_INSIGHT_MAX_BYTES: '20G' }).insightMaxBytes, 20 * 1024 ** 3);
    assert.equal(load({ TPS_INSIGHT_MAX_BYTES: '2048k' }).insightMaxBytes, 2 * 1024 ** 2);
  });

  it('stops at start on a bad value, naming the variable', () => {
    assert.throws(() => load({ TPS_INSIGHT_RETENTION_DAYS: '0' }), /TPS_INSIGHT_RETENTION_DAYS: must be an integer from 1/);
    assert.throws(() => load({ TPS_INSIGHT_MAX_BYTES: '1.5g' }), /TPS_INSIGHT_MAX_BYTES: must be a number of bytes/);
    assert.throws(() => load({ TPS_INSIGHT_MAX_BYTES: '100' }), /TPS_INSIGHT_MAX_BYTES: .*at least 1048576/);
    assert.throws(
      () => load({ TPS_INSIGHT_TENANT_SHARE_PERCENT: '101' }),
      /TPS_INSIGHT_TENANT_SHARE_PERCENT: must be an integer from 1 to 100/,
    );
    assert.throws(() => load({ TPS_INSIGHT_WHOLE_EVENTS_PER_MINUTE: 'all' }), /TPS_INSIGHT_WHOLE_EVENTS_PER_MINUTE: must be an integer/);
  });
});

describe('settings: the WAF', () => {
  it('follows ModSecurity-recommended body limits by default: 128 KiB inspected, longer refused, uploads up to 1 MiB', () => {
    const settings = load({});
    assert.equal(settings.wafRequestBodyLimit, 131072);
    assert.equal(settings.wafBodyLimitAction, 'REJECT');
    assert.equal(settings.wafMultipartBodyLimit, 1024 * 1024);
    assert.equal(load({ TPS_WAF_BODY_LIMIT_ACTION: 'PROCESS_PARTIAL' }).wafBodyLimitAction, 'PROCESS_PARTIAL');
    assert.throws(() => load({ TPS_WAF_BODY_LIMIT_ACTION: 'partial' }), /TPS_WAF_BODY_LIMIT_ACTION: must be PROCESS_PARTIAL or REJECT/);
    assert.throws(() => load({ TPS_WAF_MULTIPART_BODY_LIMIT: '-1' }), /TPS_WAF_MULTIPART_BODY_LIMIT: must be an integer/);
  });

  it('sizes the WAF threads from the cores shared out among the edge workers, and its queue per thread', () => {
    const cores = os.availableParallelism();
    assert.equal(load({ TPS_EDGE_WORKERS: '1' }).wafThreads, cores);
    assert.equal(load({ TPS_EDGE_WORKERS: String(cores) }).wafThreads, 1);
    assert.equal(load({ TPS_EDGE_WORKERS: String(cores * 4) }).wafThreads, 1);
    assert.equal(load({ TPS_WAF_THREADS: '3' }).wafThreads, 3);
    assert.equal(load({}).wafQueueLength, 64);
    assert.equal(load({ TPS_WAF_QUEUE_LENGTH: '0' }).wafQueueLength, 0);
    assert.throws(() => load({ TPS_WAF_QUEUE_LENGTH: 'lots' }), /TPS_WAF_QUEUE_LENGTH: must be an integer/);
  });

  it('refuses a client early after 3 WAF budget overruns in 10 s, for 60 s, unless told otherwise', () => {
    const defaults = load({});
    assert.deepEqual([defaults.wafOffenderOverruns, defaults.wafOffenderWindowSeconds, defaults.wafOffenderBlockSeconds], [3, 10, 60]);
    const off = load({ TPS_WAF_OFFENDER_OVERRUNS: '0', TPS_WAF_OFFENDER_WINDOW_SECONDS: '30', TPS_WAF_OFFENDER_BLOCK_SECONDS: '600' });
    assert.deepEqual([off.wafOffenderOverruns, off.wafOffenderWindowSeconds, off.wafOffenderBlockSeconds], [0, 30, 600]);
    assert.throws(() => load({ TPS_WAF_OFFENDER_BLOCK_SECONDS: '0' }), /TPS_WAF_OFFENDER_BLOCK_SECONDS/);
  });

  it("keeps a request's WAF transaction 120 s for its response unless told otherwise", () => {
    assert.equal(load({}).wafExchangeTtlSeconds, 120);
    assert.equal(load({ TPS_WAF_EXCHANGE_TTL_SECONDS: '5' }).wafExchangeTtlSeconds, 5);
    assert.throws(() => load({ TPS_WAF_EXCHANGE_TTL_SECONDS: '0' }), /TPS_WAF_EXCHANGE_TTL_SECONDS/);
  });

  it('runs our WAF engine unless told ModSecurity, whose optional package must then be installed', () => {
    assert.equal(load({}).wafEngine, 'compiled');
    // (this repository's workspaces install @tps/waf-modsecurity; without it the start stops naming the package)
    assert.equal(load({ TPS_WAF_ENGINE: 'modsecurity' }).wafEngine, 'modsecurity');
    assert.throws(() => load({ TPS_WAF_ENGINE: 'coraza' }), /TPS_WAF_ENGINE: must be modsecurity or compiled/);
  });
});

describe('settings: access log and event sinks', () => {
  it('writes no access log and ships no events by default', () => {
    const settings = load({});
    assert.equal(settings.accessLog, undefined);
    assert.equal(settings.accessLogSample, 1);
    assert.deepEqual(settings.eventSinks, []);
  });

  it('takes stdout or a file path (made absolute), and a sampling of one line in N', () => {
    assert.equal(load({ TPS_ACCESS_LOG: 'stdout' }).accessLog, 'stdout');
    assert.equal(load({ TPS_ACCESS_LOG: 'off' }).accessLog, undefined);
    assert.equal(load({ TPS_ACCESS_LOG: 'logs/access.log' }).accessLog, `${process.cwd()}/logs/access.log`);
    assert.equal(load({ TPS_ACCESS_LOG_SAMPLE: '100' }).accessLogSample, 100);
    assert.throws(() => load({ TPS_ACCESS_LOG: os.tmpdir() }), /TPS_ACCESS_LOG: .*is a folder/);
    assert.throws(() => load({ TPS_ACCESS_LOG_SAMPLE: '0.5' }), /TPS_ACCESS_LOG_SAMPLE: must be an integer from 1/);
  });

  it('reads the event sinks and stops at start on a bad one, naming the variable', () => {
    assert.deepEqual(
      load({ TPS_EVENT_SINKS: 'syslog+udp://127.0.0.1:514,file:///var/log/tps/events.jsonl' }).eventSinks.map((sink) => sink.label),
      ['syslog+udp://127.0.0.1:514', 'file:///var/log/tps/events.jsonl'],
    );
    assert.throws(
      () => load({ TPS_EVENT_SINKS: 'syslog+udp://127.0.0.1:514,http://siem.example.com' }),
      (error: Error) =>
        error instanceof SettingsError && /^TPS_EVENT_SINKS: "http:\/\/siem\.example\.com": must start with/.test(error.message),
    );
  });
});

describe('settings: the WAF budget and input limits', () => {
  const limitSettings = {
    arguments: 'wafArgumentsLimit',
    multipartParts: 'wafMultipartPartsLimit',
    jsonDepth: 'wafJsonDepthLimit',
    jsonElements: 'wafJsonElementsLimit',
    xmlDepth: 'wafXmlDepthLimit',
    valueLength: 'wafValueLengthLimit',
  } as const;

  it("defaults to the engine's limits, and the API's bounds are the engine's", () => {
    const settings = load({});
    assert.equal(settings.wafRequestBudgetMs, DEFAULT_REQUEST_BUDGET_MS);
    assert.equal(settings.wafExpensiveClientPercent, DEFAULT_EXPENSIVE_CLIENT_SHARE * 100);
    for (const [name, key] of Object.entries(limitSettings) as [
      keyof typeof limitSettings,
      (typeof limitSettings)[keyof typeof limitSettings],
    ][]) {
      assert.equal(settings[key], DEFAULT_INPUT_LIMITS[name], name);
      const schema = WafInputLimits.properties[name];
      assert.deepEqual([schema.minimum, schema.maximum], [...INPUT_LIMIT_BOUNDS[name]], name);
    }
  });

  it('reads TPS_WAF_REQUEST_BUDGET_MS and TPS_WAF_*_LIMIT, and refuses values out of range', () => {
    const settings = load({ TPS_WAF_REQUEST_BUDGET_MS: '100', TPS_WAF_ARGUMENTS_LIMIT: '500', TPS_WAF_JSON_DEPTH_LIMIT: '64' });
    assert.equal(settings.wafRequestBudgetMs, 100);
    assert.equal(settings.wafArgumentsLimit, 500);
    assert.equal(settings.wafJsonDepthLimit, 64);
    assert.throws(() => load({ TPS_WAF_ARGUMENTS_LIMIT: '0' }), /TPS_WAF_ARGUMENTS_LIMIT/);
    assert.throws(() => load({ TPS_WAF_REQUEST_BUDGET_MS: '5' }), /TPS_WAF_REQUEST_BUDGET_MS/);
    assert.equal(load({ TPS_WAF_EXPENSIVE_CLIENT_PERCENT: '100' }).wafExpensiveClientPercent, 100);
    assert.throws(() => load({ TPS_WAF_EXPENSIVE_CLIENT_PERCENT: '0' }), /TPS_WAF_EXPENSIVE_CLIENT_PERCENT/);
  });
});

describe("settings: the service's own listeners and the edge's budget", () => {
  it('bounds the API listener by default', () => {
    const settings = load({});
    assert.deepEqual(
      [
        settings.apiHeadersTimeoutSeconds,
        settings.apiRequestTimeoutSeconds,
        settings.apiKeepAliveTimeoutSeconds,
        settings.apiBodyLimit,
        settings.apiMaxConnections,
        settings.apiMaxConnectionsPerSource,
        settings.metricsMaxConnections,
        settings.edgeMaxConnections,
      ],
      [20, 60, 20, 1024 * 1024, 1024, 128, 64, undefined],
    );
  });

  it('reads each bound, and refuses a headers timeout longer than the request timeout', () => {
    const settings = load({ TPS_API_BODY_LIMIT: '64k', TPS_API_MAX_CONNECTIONS: '100', TPS_EDGE_MAX_CONNECTIONS: '5000' });
    assert.deepEqual([settings.apiBodyLimit, settings.apiMaxConnectionsPerSource, settings.edgeMaxConnections], [65536, 100, 5000]);
    assert.equal(load({ TPS_EDGE_MAX_CONNECTIONS: 'auto' }).edgeMaxConnections, undefined);
    assert.throws(
      () => load({ TPS_API_HEADERS_TIMEOUT_SECONDS: '90' }),
      /TPS_API_HEADERS_TIMEOUT_SECONDS: must not exceed TPS_API_REQUEST_TIMEOUT_SECONDS/,
    );
    assert.throws(() => load({ TPS_API_MAX_CONNECTIONS: '10', TPS_API_MAX_CONNECTIONS_PER_SOURCE: '20' }), /from 1 to 10/);
    assert.throws(() => load({ TPS_EDGE_MAX_CONNECTIONS: '0' }), /TPS_EDGE_MAX_CONNECTIONS/);
  });
});
