/**
 * The TLS-ALPN-01 dispatch of the HTTP proxy over real loopback sockets: the ClientHello reader tells
 * a validation connection from a browser's, and the challenge server presents the certificate the
 * store holds for the listener's own tenant only.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import acme from 'acme-client';
import { openStore, type Store } from '../../store/index.ts';
import { AcmeChallengeResponder } from '../../certs/acme-challenges.ts';
import { ACME_TLS_ALPN_PROTOCOL, createAcmeTlsAlpnServer, isAcmeTlsAlpn } from './tls-alpn-acme.ts';
import { readClientHello, type ClientHelloInfo } from '../../net/client-hello.ts';
import { TestCa } from '../../../test/support/pki.ts';

const inOneHour = () => new Date(Date.now() + 3600_000).toISOString();
/** The tenant that ordered, and another one (whose proxies must never answer its challenges). */
const ORDERING = 'tenant-ordering';
const OTHER = 'tenant-other';

describe('TLS-ALPN-01 answers on the proxy listener', () => {
  let dir: string;
  let store: Store;
  let responder: AcmeChallengeResponder;

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-tls-alpn-acme-'));
    store = await openStore({ dataDir: dir });
    responder = new AcmeChallengeResponder(store.acmeChallenges);
  });
  after(async () => {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('presents the challenge certificate to acme-tls/1 connections and the proxy certificate to everyone else', async () => {
    const keyAuthorization = 'alpn-tok.thumbprint';
    await store.acmeChallenges.put({
      type: 'tls-alpn-01',
      token: 'alpn-tok',
      tenantId: ORDERING,
      domain: 'tls.example.test',
      keyAuthorization,
      certificateId: 'c3',
      expiresAt: inOneHour(),
    });
    const ca = await TestCa.create('Proxy Test CA');
    const served = await ca.issue({ commonName: 'tls.example.test', dnsNames: ['tls.example.test'] });
    const proxyServer = tls.createServer(
      { cert: served.certificatePem, key: served.privateKeyPem, ALPNProtocols: ['h2', 'http/1.1'] },
      (socket) => socket.end('proxy\n'),
    );
    // One listener per tenant's proxy, each with the challenge server bound to its tenant.
    const acmeServer = createAcmeTlsAlpnServer({
      alpnChallengeCertificate: (servername) => responder.alpnChallengeCertificate(servername, ORDERING),
    });
    const otherAcmeServer = createAcmeTlsAlpnServer({
      alpnChallengeCertificate: (servername) => responder.alpnChallengeCertificate(servername, OTHER),
    });
    const hellos: (ClientHelloInfo | undefined)[] = [];
    const listen = async (validations: tls.Server, record: boolean) => {
      const server = net.createServer(async (socket) => {
        const hello = await readClientHello(socket);
        if (record) hellos.push(hello);
        (hello && isAcmeTlsAlpn(hello) ? validations : proxyServer).emit('connection', socket);
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return server;
    };
    const listener = await listen(acmeServer, true);
    const otherListener = await listen(otherAcmeServer, false);
    const port = (listener.address() as net.AddressInfo).port;
    const connect = (options: tls.ConnectionOptions, to = port) =>
      new Promise<{ certificate: X509Certificate; alpn: string | false }>((resolve, reject) => {
        const socket = tls.connect({ host: '127.0.0.1', port: to, rejectUnauthorized: false, ...options }, () => {
          const certificate = socket.getPeerX509Certificate()!;
          const alpn = socket.alpnProtocol ?? false;
          socket.destroy();
          resolve({ certificate, alpn });
        });
        socket.on('error', reject);
      });
    try {
      for (const maxVersion of ['TLSv1.2', 'TLSv1.3'] as const) {
        const validation = await connect({ servername: 'tls.example.test', ALPNProtocols: [ACME_TLS_ALPN_PROTOCOL], maxVersion });
        assert.equal(validation.alpn, ACME_TLS_ALPN_PROTOCOL, maxVersion);
        assert.equal(
          acme.crypto.isAlpnCertificateAuthorizationValid(validation.certificate.toString(), keyAuthorization),
          true,
          maxVersion,
        );

        const browser = await connect({ servername: 'tls.example.test', ALPNProtocols: ['h2', 'http/1.1'], maxVersion });
        assert.equal(browser.certificate.fingerprint256, served.fingerprint256, maxVersion);
        assert.equal(browser.alpn, 'h2');
      }
      assert.deepEqual(hellos[0], { servername: 'tls.example.test', alpnProtocols: ['acme-tls/1'] });
      assert.deepEqual(hellos[1], { servername: 'tls.example.test', alpnProtocols: ['h2', 'http/1.1'] });

      // No pending challenge for the name: the validation handshake fails, nothing else is shown.
      await assert.rejects(connect({ servername: 'nothing.example.test', ALPNProtocols: [ACME_TLS_ALPN_PROTOCOL] }));
      // Another tenant's listener: the pending challenge is not its own, the handshake fails too.
      const otherPort = (otherListener.address() as net.AddressInfo).port;
      await assert.rejects(connect({ servername: 'tls.example.test', ALPNProtocols: [ACME_TLS_ALPN_PROTOCOL] }, otherPort));
    } finally {
      listener.close();
      otherListener.close();
      otherAcmeServer.close();
      acmeServer.close();
      proxyServer.close();
    }
  });
});
