/**
 * Pebble, Let's Encrypt's ACME test CA (Debian package `pebble`), for the tests: `pebble` on a
 * loopback address of its own, with `pebble-challtestsrv` as its DNS server (only the mock DNS and
 * the management API are on; its own challenge responders are off, so the validations really reach
 * our responders). Every test domain resolves to `targetIp`, the address of the proxy (or of the
 * test's stand-in responder).
 *
 * Pebble runs with PEBBLE_VA_ALWAYS_VALID=0 (challenges are really validated), PEBBLE_VA_NOSLEEP=1
 * (no artificial delays) and PEBBLE_AUTHZREUSE=0 (orders get fresh authorizations, except 1 name in
 * 100 where Pebble 2.4.0 still reuses a valid one: `rand.Intn(100) > authzReusePercent`; a test that
 * must see a challenge deactivates earlier authorizations first, as test/e2e/acme.test.ts does).
 * Its HTTPS certificate comes from a throw-away TestCa whose root the
 * client must trust (`caBundlePem`); the CA that signs the issued certificates is Pebble's own,
 * regenerated at every start (`rootPem()`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { TestCa } from './pki.ts';
import { freePort } from './ports.ts';

export interface PebbleOptions {
  /** Loopback address Pebble and its DNS server listen on. */
  ip?: string;
  /** Where the test domains resolve (A records): the proxy's front-end IP. */
  targetIp?: string;
  /** Port Pebble validates HTTP-01 on (a real CA: 80). */
  httpPort?: number;
  /** Port Pebble validates TLS-ALPN-01 on (a real CA: 443). */
  tlsPort?: number;
}

export interface Pebble {
  /** ACME directory URL (https). */
  directoryUrl: string;
  /** PEM of the CA that signed Pebble's HTTPS certificate: what an ACME client must trust. */
  caBundlePem: string;
  ip: string;
  targetIp: string;
  httpPort: number;
  tlsPort: number;
  /** The root of the chains Pebble issues (GET /roots/0 of its management API). */
  rootPem(): Promise<string>;
  /** Makes `host` resolve to `ip` (an A record in pebble-challtestsrv). */
  addA(host: string, ip: string): Promise<void>;
  /** Everything both processes printed. */
  output(): string;
  stop(): Promise<void>;
}

function httpsGet(url: string, ca: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const request = https.get(url, { ca, timeout: 5000 }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
    });
    request.on('timeout', () => request.destroy(new Error(`GET ${url} timed out`)));
    request.on('error', reject);
  });
}

async function postJson(url: string, body: unknown): Promise<void> {
  const response = await fetch(url, { method: 'POST', body: JSON.stringify(body), signal: AbortSignal.timeout(5000) });
  if (!response.ok) throw new Error(`POST ${url}: ${response.status} ${await response.text()}`);
}

/** Retries `probe` every 100 ms until it resolves, for at most `ms`. */
async function waitFor(what: string, ms: number, probe: () => Promise<unknown>, output: () => string): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      await probe();
      return;
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`${what} not ready within ${ms} ms (${(error as Error).message}):\n${output()}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

export async function startPebble(options: PebbleOptions = {}): Promise<Pebble> {
  const ip = options.ip ?? '127.0.0.60';
  const targetIp = options.targetIp ?? '127.0.0.61';
  const httpPort = options.httpPort ?? 80;
  const tlsPort = options.tlsPort ?? 443;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-pebble-'));

  const ca = await TestCa.create('Pebble HTTPS Test CA');
  const serverCertificate = await ca.issue({ commonName: 'pebble', dnsNames: ['localhost', 'pebble'], ipAddresses: [ip] });
  fs.writeFileSync(path.join(dir, 'cert.pem'), serverCertificate.certificatePem);
  fs.writeFileSync(path.join(dir, 'key.pem'), serverCertificate.privateKeyPem, { mode: 0o600 });

  const [acmePort, managementPort, dnsPort, dnsManagementPort] = [
    await freePort(ip),
    await freePort(ip),
    await freePort(ip),
    await freePort(ip),
  ];
  fs.writeFileSync(
    path.join(dir, 'pebble-config.json'),
    JSON.stringify({
      pebble: {
        listenAddress: `${ip}:${acmePort}`,
        managementListenAddress: `${ip}:${managementPort}`,
        certificate: path.join(dir, 'cert.pem'),
        privateKey: path.join(dir, 'key.pem'),
        httpPort,
        tlsPort,
        ocspResponderURL: '',
        externalAccountBindingRequired: false,
      },
    }),
  );

  let output = '';
  const children: ChildProcess[] = [];
  const launch = (command: string, args: string[], env: Record<string, string> = {}) => {
    const child = spawn(command, args, { cwd: dir, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    children.push(child);
    return child;
  };

  const stop = async () => {
    await Promise.all(
      children.map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
            child.once('exit', () => {
              clearTimeout(timer);
              resolve();
            });
            child.kill('SIGTERM');
          }),
      ),
    );
    fs.rmSync(dir, { recursive: true, force: true });
  };

  try {
    // The mock DNS: every name resolves to the target (A); no AAAA answers, so the validation
    // cannot wander to ::1. Its own HTTP-01 / TLS-ALPN-01 responders stay off.
    launch('pebble-challtestsrv', [
      '-dns01',
      `${ip}:${dnsPort}`,
      '-http01',
      '',
      '-https01',
      '',
      '-tlsalpn01',
      '',
      '-management',
      `${ip}:${dnsManagementPort}`,
      '-defaultIPv4',
      targetIp,
      '-defaultIPv6',
      '',
    ]);
    launch('pebble', ['-config', path.join(dir, 'pebble-config.json'), '-dnsserver', `${ip}:${dnsPort}`], {
      PEBBLE_VA_ALWAYS_VALID: '0',
      PEBBLE_VA_NOSLEEP: '1',
      PEBBLE_AUTHZREUSE: '0',
    });

    const directoryUrl = `https://${ip}:${acmePort}/dir`;
    const caBundlePem = ca.certificatePem;
    await waitFor(
      'pebble-challtestsrv',
      15_000,
      () => postJson(`http://${ip}:${dnsManagementPort}/set-default-ipv4`, { ip: targetIp }),
      () => output,
    );
    await waitFor(
      'pebble',
      15_000,
      async () => {
        const response = await httpsGet(directoryUrl, caBundlePem);
        if (response.status !== 200) throw new Error(`directory answered ${response.status}`);
      },
      () => output,
    );

    return {
      directoryUrl,
      caBundlePem,
      ip,
      targetIp,
      httpPort,
      tlsPort,
      async rootPem() {
        const response = await httpsGet(`https://${ip}:${managementPort}/roots/0`, caBundlePem);
        if (response.status !== 200) throw new Error(`pebble /roots/0 answered ${response.status}`);
        return response.body;
      },
      addA: (host, address) => postJson(`http://${ip}:${dnsManagementPort}/add-a`, { host, addresses: [address] }),
      output: () => output,
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
