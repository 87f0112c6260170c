/**
 * TLS-ALPN-01 on a proxy's TLS port (RFC 8737): a CA's validation connection offers ALPN
 * `acme-tls/1` (and nothing else) with the domain as SNI, and must get the challenge certificate;
 * every other client gets the proxy's certificate as usual.
 *
 * Node's `SNICallback` does not see the offered ALPN protocols, and `ALPNCallback` runs after
 * `SNICallback` in TLS 1.2 but before it in TLS 1.3, so the certificate cannot be chosen from
 * inside one `tls.Server` reliably. Instead the listener reads the ClientHello first (without
 * consuming it: src/net/client-hello.ts), and hands the socket to one of two servers:
 *
 *   const hello = await readClientHello(socket);            // net.Server 'connection' handler
 *   if (hello && isAcmeTlsAlpn(hello)) acmeServer.emit('connection', socket);
 *   else proxyTlsServer.emit('connection', socket);
 *
 * where `acmeServer = createAcmeTlsAlpnServer(provider)`, with `provider` bound to the tenant of
 * the listener's proxy. The bytes read stay in the socket (`unshift`), so the TLS server sees the
 * whole handshake.
 */
import tls from 'node:tls';
import type { ChallengeCertificate } from '../../certs/acme-challenges.ts';
import type { ClientHelloInfo } from '../../net/client-hello.ts';

export const ACME_TLS_ALPN_PROTOCOL = 'acme-tls/1';

/** A TLS-ALPN-01 validation connection: it offers `acme-tls/1`. */
export function isAcmeTlsAlpn(hello: ClientHelloInfo): boolean {
  return hello.alpnProtocols.includes(ACME_TLS_ALPN_PROTOCOL);
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
