/**
 * Test certificates made with the openssl CLI in a temporary folder: a CA (`openssl ca`, so it can
 * revoke and publish a CRL), server and client leaf certificates signed by it, and self-signed ones.
 * EC P-256 keys: fast to generate, so a test file can make what it needs.
 */
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export interface KeyPair {
  certPem: string;
  keyPem: string;
  /** SHA-256 of the DER certificate, lower-case hex without colons. */
  fingerprint: string;
  /** Path of the certificate file (for curl and openssl s_client). */
  certPath: string;
  keyPath: string;
}

export interface LeafOptions {
  /** DNS subject alternative names. */
  dns?: string[];
  /** IP subject alternative names. */
  ips?: string[];
  /** A client certificate (extendedKeyUsage clientAuth) instead of a server one. */
  client?: boolean;
}

export class TestCa {
  readonly name: string;
  readonly dir: string;
  readonly cert: KeyPair;
  private counter = 0;

  private constructor(name: string, dir: string, cert: KeyPair) {
    this.name = name;
    this.dir = dir;
    this.cert = cert;
  }

  /** A new CA in its own subfolder of `root`. */
  static create(root: string, name: string): TestCa {
    const dir = path.join(root, name.replace(/\W+/g, '-'));
    fs.mkdirSync(path.join(dir, 'newcerts'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'index.txt'), '');
    fs.writeFileSync(path.join(dir, 'serial'), '1000\n');
    fs.writeFileSync(path.join(dir, 'crlnumber'), '1000\n');
    fs.writeFileSync(
      path.join(dir, 'ca.cnf'),
      [
        '[ ca ]',
        'default_ca = CA_default',
        '[ CA_default ]',
        `dir = ${dir}`,
        'database = $dir/index.txt',
        'new_certs_dir = $dir/newcerts',
        'certificate = $dir/ca.pem',
        'private_key = $dir/ca.key',
        'serial = $dir/serial',
        'crlnumber = $dir/crlnumber',
        'default_md = sha256',
        'default_days = 30',
        'default_crl_days = 30',
        'policy = policy_any',
        'unique_subject = no',
        'copy_extensions = none',
        '[ policy_any ]',
        'commonName = supplied',
        'organizationName = optional',
        '',
      ].join('\n'),
    );
    const keyPath = path.join(dir, 'ca.key');
    const certPath = path.join(dir, 'ca.pem');
    openssl([
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
      '-keyout', keyPath, '-out', certPath, '-days', '30', '-subj', `/O=TPS tests/CN=${name}`,
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
    ]);
    return new TestCa(name, dir, readPair(certPath, keyPath));
  }

  /** A leaf certificate signed by this CA. */
  issue(commonName: string, options: LeafOptions = {}): KeyPair {
    const base = path.join(this.dir, `leaf-${++this.counter}`);
    const keyPath = `${base}.key`;
    const csrPath = `${base}.csr`;
    const certPath = `${base}.pem`;
    const extPath = `${base}.ext`;
    openssl(['req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', keyPath, '-out', csrPath, '-subj', `/O=TPS tests/CN=${commonName}`]);
    const san = [...(options.dns ?? []).map((d) => `DNS:${d}`), ...(options.ips ?? []).map((ip) => `IP:${ip}`)];
    fs.writeFileSync(
      extPath,
      [
        '[ ext ]',
        'basicConstraints = critical,CA:FALSE',
        'keyUsage = critical,digitalSignature,keyEncipherment',
        `extendedKeyUsage = ${options.client ? 'clientAuth' : 'serverAuth'}`,
        ...(san.length > 0 ? [`subjectAltName = ${san.join(',')}`] : []),
        '',
      ].join('\n'),
    );
    openssl(['ca', '-batch', '-notext', '-config', path.join(this.dir, 'ca.cnf'), '-in', csrPath, '-out', certPath, '-extfile', extPath, '-extensions', 'ext']);
    return readPair(certPath, keyPath);
  }

  revoke(leaf: KeyPair): void {
    openssl(['ca', '-config', path.join(this.dir, 'ca.cnf'), '-revoke', leaf.certPath]);
  }

  /** The CA's current CRL (PEM), listing what `revoke` revoked. */
  crl(): string {
    const crlPath = path.join(this.dir, `crl-${++this.counter}.pem`);
    openssl(['ca', '-config', path.join(this.dir, 'ca.cnf'), '-gencrl', '-out', crlPath]);
    return fs.readFileSync(crlPath, 'utf8');
  }
}

/** A self-signed server certificate (no CA knows it). */
export function selfSigned(root: string, commonName: string, options: LeafOptions = {}): KeyPair {
  const base = path.join(root, `self-${commonName.replace(/\W+/g, '-')}-${process.hrtime.bigint()}`);
  const san = [...(options.dns ?? []).map((d) => `DNS:${d}`), ...(options.ips ?? []).map((ip) => `IP:${ip}`)];
  openssl([
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
    '-keyout', `${base}.key`, '-out', `${base}.pem`, '-days', '30', '-subj', `/O=TPS tests/CN=${commonName}`,
    ...(san.length > 0 ? ['-addext', `subjectAltName=${san.join(',')}`] : []),
  ]);
  return readPair(`${base}.pem`, `${base}.key`);
}

export function tempDir(prefix: string): { dir: string; remove(): void } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `tps-${prefix}-`));
  return { dir, remove: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

function readPair(certPath: string, keyPath: string): KeyPair {
  const certPem = fs.readFileSync(certPath, 'utf8');
  return {
    certPem,
    keyPem: fs.readFileSync(keyPath, 'utf8'),
    fingerprint: new X509Certificate(certPem).fingerprint256.replaceAll(':', '').toLowerCase(),
    certPath,
    keyPath,
  };
}

function openssl(args: string[]): void {
  execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}
