/**
 * TLS-ALPN-01 on a proxy's TLS port (RFC 8737): a CA's validation connection offers ALPN
 * `acme-tls/1` (and nothing else) with the domain as SNI, and must get the challenge certificate;
 * every other client gets the proxy's certificate as usual.
 *
 * Node's `SNICallback` does not see the offered ALPN protocols, and `ALPNCallback` runs after
 * `SNICallback` in TLS 1.2 but before it in TLS 1.3, so the certificate cannot be chosen from
 * inside one `tls.Server` reliably. Instead the listener reads the ClientHello first (without
 * consuming it), and hands the socket to one of two servers:
 *
 *   const hello = await readClientHello(socket);            // net.Server 'connection' handler
 *   if (hello && isAcmeTlsAlpn(hello)) acmeServer.emit('connection', socket);
 *   else proxyTlsServer.emit('connection', socket);
 *
 * where `acmeServer = createAcmeTlsAlpnServer(provider)`, with `provider` bound to the tenant of
 * the listener's proxy. The bytes read stay in the socket (`unshift`), so the TLS server sees the
 * whole handshake.
 */
import net from 'node:net';
import tls from 'node:tls';
import type { ChallengeCertificate } from './acme-challenges.ts';
import { readPrefix } from '../edge/net/read-prefix.ts';

export const ACME_TLS_ALPN_PROTOCOL = 'acme-tls/1';

export interface ClientHelloInfo {
  /** SNI host name, if the client sent one. */
  servername: string | undefined;
  /** ALPN protocols the client offers, in its order. */
  alpnProtocols: string[];
}

/** Largest TLS record (2^14 bytes plus header and expansion): a ClientHello must fit in the first one. */
const MAX_RECORD = 16384 + 2048 + 5;

/**
 * Parses the first TLS record of a connection as a ClientHello. `'incomplete'`: more bytes are
 * needed; undefined: not a TLS ClientHello (or one split over several records, which real clients
 * do not do).
 */
export function parseClientHello(data: Buffer): ClientHelloInfo | 'incomplete' | undefined {
  if (data.length < 1) return 'incomplete';
  if (data[0] !== 0x16) return undefined; // not a handshake record
  if (data.length < 5) return 'incomplete';
  const recordLength = data.readUInt16BE(3);
  if (recordLength > MAX_RECORD) return undefined;
  if (data.length < 5 + recordLength) return 'incomplete';
  const record = data.subarray(5, 5 + recordLength);
  try {
    if (record[0] !== 0x01) return undefined; // not a ClientHello
    const helloLength = record.readUIntBE(1, 3);
    if (helloLength + 4 > record.length) return undefined; // split over records
    const hello = record.subarray(4, 4 + helloLength);
    let offset = 2 + 32; // client_version, random
    offset += 1 + hello[offset]!; // session_id
    offset += 2 + hello.readUInt16BE(offset); // cipher_suites
    offset += 1 + hello[offset]!; // compression_methods
    const info: ClientHelloInfo = { servername: undefined, alpnProtocols: [] };
    if (offset >= hello.length) return info;
    const extensionsEnd = offset + 2 + hello.readUInt16BE(offset);
    offset += 2;
    while (offset + 4 <= extensionsEnd && extensionsEnd <= hello.length) {
      const type = hello.readUInt16BE(offset);
      const length = hello.readUInt16BE(offset + 2);
      const body = hello.subarray(offset + 4, offset + 4 + length);
      offset += 4 + length;
      if (type === 0x0000) {
        // server_name: list length, then (type, length, name)*; host_name is type 0.
        let at = 2;
        while (at + 3 <= body.length) {
          const nameType = body[at]!;
          const nameLength = body.readUInt16BE(at + 1);
          if (nameType === 0) info.servername = body.subarray(at + 3, at + 3 + nameLength).toString('latin1');
          at += 3 + nameLength;
        }
      } else if (type === 0x0010) {
        // application_layer_protocol_negotiation: list length, then (length, protocol)*.
        let at = 2;
        while (at + 1 <= body.length) {
          const protocolLength = body[at]!;
          info.alpnProtocols.push(body.subarray(at + 1, at + 1 + protocolLength).toString('latin1'));
          at += 1 + protocolLength;
        }
      }
    }
    return info;
  } catch {
    return undefined; // truncated fields: not a well-formed ClientHello
  }
}

/** A TLS-ALPN-01 validation connection: it offers `acme-tls/1`. */
export function isAcmeTlsAlpn(hello: ClientHelloInfo): boolean {
  return hello.alpnProtocols.includes(ACME_TLS_ALPN_PROTOCOL);
}

/**
 * Reads the ClientHello off a fresh connection without consuming it: whatever was read is put
 * back (`unshift`) before the promise settles. Undefined when the first bytes are not a
 * ClientHello, or none came within `timeoutMs`, or the connection ended.
 */
export function readClientHello(socket: net.Socket, timeoutMs = 10_000): Promise<ClientHelloInfo | undefined> {
  const nothing = (buffered: Buffer) => ({ result: undefined, putBack: buffered });
  return readPrefix<ClientHelloInfo | undefined>(socket, {
    timeoutMs,
    examine(buffered) {
      const parsed = parseClientHello(buffered);
      if (parsed !== 'incomplete') return { result: parsed, putBack: buffered };
      return buffered.length > MAX_RECORD + 5 ? nothing(buffered) : 'more';
    },
    ended: nothing,
    timedOut: nothing,
  });
}

/** The TLS-ALPN-01 challenge certificates one listener may present: those of its proxy's tenant. */
export interface AlpnChallengeSource {
  alpnChallengeCertificate(servername: string): Promise<ChallengeCertificate | undefined>;
}

/**
 * The TLS server for validation connections: it presents the challenge certificate of the SNI
 * name, negotiates `acme-tls/1`, and closes once the handshake is done (RFC 8737: no application
 * data). A name without a pending challenge (of the source's tenant) fails the handshake.
 */
export function createAcmeTlsAlpnServer(provider: AlpnChallengeSource, handshakeTimeoutMs = 10_000): tls.Server {
  const server = tls.createServer({
    ALPNProtocols: [ACME_TLS_ALPN_PROTOCOL],
    handshakeTimeout: handshakeTimeoutMs,
    minVersion: 'TLSv1.2',
    SNICallback: (servername, callback) => {
      provider.alpnChallengeCertificate(servername).then(
        (certificate) => {
          if (!certificate) return callback(new Error(`no TLS-ALPN-01 challenge pending for ${servername}`), undefined);
          callback(null, tls.createSecureContext({ cert: certificate.certPem, key: certificate.keyPem }));
        },
        (error: Error) => callback(error, undefined),
      );
    },
  });
  server.on('secureConnection', (socket) => socket.end());
  // A failed validation handshake is the client's business; nothing to log or crash on.
  server.on('tlsClientError', (_error, socket) => socket.destroy());
  return server;
}
