import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { loadSettings, SettingsError } from './settings.ts';

/** Settings from these variables only (never the environment of the test run). */
const load = (env: Record<string, string>, flags: Parameters<typeof loadSettings>[0] = {}) => loadSettings(flags, { TPS_ACME_DIRECTORY_URL: 'off', ...env });

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
      (error: Error) => error instanceof SettingsError && /TPS_TRUSTED_PROXIES \(--trusted-proxies\): .*"10\.0\.0\.0\/33", "lb\.example\.com"/.test(error.message),
    );
  });

  it('refuses an unknown PROXY protocol mode, and a mode without trusted networks', () => {
    assert.throws(() => load({ TPS_TRUSTED_PROXIES: '10.0.0.0/8', TPS_LISTENER_PROXY_PROTOCOL: 'on' }), /TPS_LISTENER_PROXY_PROTOCOL .*off, optional or required/);
    assert.throws(() => load({ TPS_LISTENER_PROXY_PROTOCOL: 'required' }), /TPS_LISTENER_PROXY_PROTOCOL .*needs TPS_TRUSTED_PROXIES/);
  });
});

describe('settings: errors', () => {
  it('name the environment variable, and the flag only where the CLI has one', () => {
    assert.throws(() => load({ TPS_WAF_THREADS: 'many' }), (error: Error) => error instanceof SettingsError && /TPS_WAF_THREADS: must be an integer/.test(error.message));
    assert.throws(() => load({ TPS_LOCATION: 'frankfurt' }), (error: Error) => error instanceof SettingsError && /TPS_LOCATION \(--location\): /.test(error.message));
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

describe('settings: hostile traffic bounds', () => {
  it('has defaults for the HTTP connection caps, IPv6 prefixes, counters, UDP budget, password hashes and the unauthenticated API limit', () => {
    const settings = load({});
    assert.equal(settings.httpMaxConnectionsPerSource, 256);
    assert.equal(settings.httpMaxNewConnectionsPerSecondPerSource, 100);
    assert.equal(settings.httpMaxConnections, 10_000);
    assert.equal(settings.rateLimitIpv6Prefix, 64);
    assert.equal(settings.rateLimitClientsPerProxy, 16_384);
    assert.equal(settings.udpReplyBudgetFactor, 3);
    assert.equal(settings.passwordHashConcurrency, 2);
    assert.equal(settings.apiUnauthenticatedRateLimitPerMinute, 300);
  });

  it('reads each from its variable', () => {
    const settings = load({
      TPS_HTTP_MAX_CONNECTIONS_PER_SOURCE: '4',
      TPS_HTTP_MAX_NEW_CONNECTIONS_PER_SECOND_PER_SOURCE: '5',
      TPS_HTTP_MAX_CONNECTIONS: '6',
      TPS_RATE_LIMIT_IPV6_PREFIX: '56',
      TPS_RATE_LIMIT_CLIENTS_PER_PROXY: '1024',
      TPS_UDP_REPLY_BUDGET_FACTOR: '10',
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
        settings.passwordHashConcurrency,
        settings.apiUnauthenticatedRateLimitPerMinute,
      ],
      [4, 5, 6, 56, 1024, 10, 1, 60],
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
