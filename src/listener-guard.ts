/**
 * The bounds of the service's own HTTP listeners (the API, the operators' listener), what nginx
 * and HAProxy give a public listener: connection caps checked at accept, and every timeout that
 * ends a slow or idle client counted.
 *
 * - Total cap: `server.maxConnections`, so Node closes a connection over it before any JavaScript
 *   object is made for it (the 'drop' event counts it).
 * - Per source: open connections per IPv4 address or IPv6 prefix; over the cap the connection is
 *   reset before the HTTP parser sees a byte. Trusted reverse proxies count towards the total only:
 *   capping them per source would cap all their clients at once.
 * - Timeouts (the server's own): the head (headersTimeout), the whole request (requestTimeout),
 *   silence mid-exchange (the socket timeout); each counted by the stage it ended.
 */
import type http from 'node:http';
import type net from 'node:net';
import type { Counter, Gauge } from 'prom-client';
import { sourceKey } from './net/source-key.ts';
import { unmapIpv4 } from './net/ip.ts';

export type ListenerName = 'api' | 'metrics';
export type ListenerRefusalStage = 'accept' | 'head' | 'body' | 'idle';
export type ListenerRefusalReason =
  | 'CONNECTIONS'
  | 'SOURCE_CONNECTIONS'
  | 'HEADERS_TIMEOUT'
  | 'REQUEST_TIMEOUT'
  | 'IDLE_TIMEOUT'
  | 'BODY_TOO_LARGE'
  | 'RATE_LIMIT';

export interface ListenerGuardSettings {
  listener: ListenerName;
  maxConnections: number;
  /** Absent: no cap per source. */
  maxConnectionsPerSource?: number;
  /** IPv6 sources are counted per prefix of this length. */
  ipv6Prefix: number;
  /** Peers (reverse proxies in front of the listener) not capped per source. */
  exemptFromSourceCap?: (address: string) => boolean;
  /**
   * Whether the guard answers the clients whose request timed out (408, then closed). A server
   * with a clientError handler of its own (Fastify's) keeps it; a plain node:http server needs
   * this, since any clientError listener replaces Node's default answer.
   */
  answerClientErrors: boolean;
}

export interface ListenerMetrics {
  listenerRefused: Counter<'listener' | 'stage' | 'reason'>;
  listenerConnections: Gauge<'listener'>;
}

export interface ListenerGuard {
  /** Connections open now, as the guard counts them (those past the per-source check). */
  readonly open: number;
  /** Counts a refusal made by the server's own code (a body over the limit, a rate limit). */
  refused(stage: ListenerRefusalStage, reason: ListenerRefusalReason): void;
}

/** Puts the caps in front of `server`'s connection listeners and counts its timeouts. Call before `listen`. */
export function guardListener(server: http.Server, settings: ListenerGuardSettings, metrics: ListenerMetrics): ListenerGuard {
  const refused = (stage: ListenerRefusalStage, reason: ListenerRefusalReason): void => {
    metrics.listenerRefused.inc({ listener: settings.listener, stage, reason });
  };
  const gauge = metrics.listenerConnections.labels({ listener: settings.listener });
  gauge.set(0);
  server.maxConnections = settings.maxConnections;
  server.on('drop', () => refused('accept', 'CONNECTIONS'));

  const perSource = new Map<string, number>();
  let open = 0;
  const connectionListeners = server.listeners('connection') as ((socket: net.Socket) => void)[];
  server.removeAllListeners('connection');
  server.on('connection', (socket: net.Socket) => {
    const cap = settings.maxConnectionsPerSource;
    const peer = unmapIpv4(socket.remoteAddress ?? '');
    if (cap !== undefined && peer !== '' && settings.exemptFromSourceCap?.(peer) !== true) {
      const key = sourceKey(peer, settings.ipv6Prefix);
      const current = perSource.get(key) ?? 0;
      if (current >= cap) {
        socket.on('error', () => {});
        socket.resetAndDestroy();
        refused('accept', 'SOURCE_CONNECTIONS');
        return;
      }
      perSource.set(key, current + 1);
      socket.once('close', () => {
        const left = (perSource.get(key) ?? 1) - 1;
        if (left === 0) perSource.delete(key);
        else perSource.set(key, left);
      });
    }
    open++;
    gauge.inc();
    socket.once('close', () => {
      open--;
      gauge.dec();
    });
    for (const listener of connectionListeners) listener.call(server, socket);
  });

  // The request whose head arrived last on each connection: a timeout while its body is still
  // coming is the body's; otherwise the next head's.
  const current = new WeakMap<net.Socket, http.IncomingMessage>();
  server.on('request', (request: http.IncomingMessage) => current.set(request.socket, request));
  server.on('clientError', (error: NodeJS.ErrnoException, socket: net.Socket) => {
    if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
      const request = current.get(socket);
      if (request !== undefined && !request.complete) refused('body', 'REQUEST_TIMEOUT');
      else refused('head', 'HEADERS_TIMEOUT');
    }
    if (!settings.answerClientErrors) return;
    if (socket.writable && !(socket as { _httpMessage?: { headersSent?: boolean } | null })._httpMessage?.headersSent) {
      socket.write(
        error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
          ? 'HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n'
          : error.code === 'HPE_HEADER_OVERFLOW'
            ? 'HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n'
            : 'HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n',
      );
    }
    socket.destroy();
  });
  // A listener here replaces Node's default (destroy the socket): it must do that itself. The
  // keep-alive timeout ends the same way; between exchanges (no request, no response) it is the
  // ordinary end of an idle connection, not a refusal.
  server.on('timeout', (socket: net.Socket) => {
    const state = socket as { _httpMessage?: unknown; parser?: { incoming?: unknown } | null };
    if (state._httpMessage != null || state.parser?.incoming != null) refused('idle', 'IDLE_TIMEOUT');
    socket.destroy();
  });

  return {
    get open() {
      return open;
    },
    refused,
  };
}

/** The timeouts and the check interval of a guarded listener, as node:http takes them. */
export interface ListenerTimeouts {
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
}

/**
 * How often Node looks for requests past their head or request deadline. Its default (30 s) would
 * let a slow head live up to 30 s past its deadline; a second costs one walk over the open
 * connections.
 */
export const CONNECTIONS_CHECKING_INTERVAL_MS = 1_000;
