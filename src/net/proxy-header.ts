/**
 * PROXY protocol headers (v1 and v2) from load balancers in front of the edge, read off a connection
 * before anything else on it, TLS included (TPS_LISTENER_PROXY_PROTOCOL):
 * - only from trusted peers (`ProxyHeaderPolicy.readsProxyHeader`, the client-address policy's); from anyone else the bytes
 *   are left alone, and the listener treats them as it treats any data (an HTTP parser answers 400,
 *   a TLS handshake fails, an L4 proxy passes them to the origin);
 * - `required`: a trusted peer's connection that does not start with a header is closed;
 *   `optional`: it is taken as it is (a trusted peer that says nothing for `headerTimeoutMs` too);
 * - a malformed header, or a connection that ends or stalls in the middle of one, is closed.
 * What follows the header is put back on the socket for the listener, byte for byte.
 */
import type net from 'node:net';
import { readPrefix } from './read-prefix.ts';
import { decodeProxyHeader, type ProxiedAddresses } from './proxy-protocol.ts';
import type { ProxyHeaderPolicy } from './types.ts';

export type ProxyHeaderOutcome =
  /** A header; `addresses` undefined for v1 UNKNOWN / v2 LOCAL (the connection's own addresses stand). */
  | { kind: 'header'; addresses: ProxiedAddresses | undefined }
  /** No header (`optional` only); the bytes read are back on the socket. */
  | { kind: 'absent' }
  /** The connection must be closed. */
  | { kind: 'refused'; reason: 'MISSING' | 'INVALID' | 'TIMEOUT' | 'CLOSED' };

/** A v2 header is at most 16 + 65535 bytes; nothing longer is buffered. */
const MAX_HEADER_BYTES = 16 + 65_535;

/** Connections whose PROXY header named their client: the accepted socket -> what it said. */
const proxiedConnections = new WeakMap<object, ProxiedAddresses>();

/**
 * The addresses a connection's PROXY header named, for the accepted socket, or for the TLS socket
 * wrapping it (its `_parent`), which HTTP/2 requests reach through their socket proxy.
 */
export function proxiedAddressesOf(socket: object): ProxiedAddresses | undefined {
  const direct = proxiedConnections.get(socket);
  if (direct !== undefined) return direct;
  const parent = (socket as { _parent?: object | null })._parent;
  return parent ? proxiedConnections.get(parent) : undefined;
}

/**
 * Reads a PROXY header at the start of `socket` (accepted, nothing read from it yet). The socket is
 * left paused, with whatever followed the header put back (`unshift`) for its next reader.
 */
export function readProxyHeader(socket: net.Socket, options: { required: boolean; timeoutMs: number }): Promise<ProxyHeaderOutcome> {
  const refused = (reason: 'INVALID' | 'TIMEOUT' | 'CLOSED') => ({ result: { kind: 'refused', reason } as const, putBack: undefined });
  return readPrefix<ProxyHeaderOutcome>(socket, {
    timeoutMs: options.timeoutMs,
    examine(buffered) {
      const decoded = decodeProxyHeader(buffered);
      if (decoded === 'incomplete') return buffered.length > MAX_HEADER_BYTES ? refused('INVALID') : 'more';
      if (decoded === 'invalid') return refused('INVALID');
      if (decoded === 'none')
        return { result: options.required ? { kind: 'refused', reason: 'MISSING' } : { kind: 'absent' }, putBack: buffered };
      return { result: { kind: 'header', addresses: decoded.addresses }, putBack: buffered.subarray(decoded.length) };
    },
    ended: () => refused('CLOSED'),
    // A silent trusted peer without a header is fine when it is optional (the listener's own
    // timeouts take over); a header begun and not finished is not.
    timedOut: (buffered) =>
      buffered.length === 0 && !options.required ? { result: { kind: 'absent' }, putBack: undefined } : refused('TIMEOUT'),
  });
}

/** The read options a policy sets (`required` mode, the header timeout). */
export function headerReadOptions(policy: Pick<ProxyHeaderPolicy, 'proxyProtocol' | 'headerTimeoutMs'>): {
  required: boolean;
  timeoutMs: number;
} {
  return { required: policy.proxyProtocol === 'required', timeoutMs: policy.headerTimeoutMs };
}

/**
 * Puts PROXY header reading in front of a listener: connections from peers the policy trusts go to
 * the server's own 'connection' listeners (HTTP parser, TLS handshake...) once their header is read,
 * with its addresses recorded for `proxiedAddressesOf`; all others at once, untouched.
 *
 * `resume`: resume the socket after handing it on (a plain HTTP server reads from the socket's
 * stream; a TLS server takes what was put back by itself and must not be resumed).
 * Call it after any other wrapping of 'connection' listeners that must see the bytes after the header
 * (the ACME TLS-ALPN dispatch), and before adding listeners that must see the connection at once
 * (socket tracking).
 */
export function acceptProxyHeaders(
  server: net.Server,
  policy: ProxyHeaderPolicy,
  options: { resume: boolean; onRefused?: (reason: string) => void },
): void {
  const listeners = server.listeners('connection') as ((socket: net.Socket) => void)[];
  server.removeAllListeners('connection');
  const handOn = (socket: net.Socket): void => {
    for (const listener of listeners) listener.call(server, socket);
  };
  const readOptions = headerReadOptions(policy);
  server.on('connection', (socket: net.Socket) => {
    const peer = socket.remoteAddress;
    if (peer === undefined || !policy.readsProxyHeader(peer)) {
      handOn(socket);
      return;
    }
    // Until a listener takes the socket, its errors are ours (a reset while reading the header).
    socket.on('error', ignore);
    void readProxyHeader(socket, readOptions).then((outcome) => {
      if (outcome.kind === 'refused') {
        options.onRefused?.(outcome.reason);
        socket.destroy();
        return;
      }
      socket.off('error', ignore);
      if (socket.destroyed) return;
      if (outcome.kind === 'header' && outcome.addresses !== undefined) proxiedConnections.set(socket, outcome.addresses);
      handOn(socket);
      if (options.resume) socket.resume();
    });
  });
}

function ignore(): void {}
