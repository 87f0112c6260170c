/**
 * The tests' PKI: CAs, intermediates, server and client leaves with any dates and key types,
 * self-signed certificates, and CRLs. Built with @peculiar/x509 over Node's WebCrypto, so no
 * openssl process; `writePemFile` puts a PEM where a command-line tool (curl, openssl s_client)
 * can read it.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
// @peculiar/x509 resolves its algorithms through tsyringe, which needs the Reflect metadata polyfill first.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';

x509.cryptoProvider.set(crypto.webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

// WebCrypto's types, from Node's own definitions (the project compiles without the DOM library).
type CryptoKey = crypto.webcrypto.CryptoKey;
type CryptoKeyPair = crypto.webcrypto.CryptoKeyPair;
type Algorithm = crypto.webcrypto.Algorithm;
type EcdsaParams = crypto.webcrypto.EcdsaParams;
type RsaHashedKeyGenParams = crypto.webcrypto.RsaHashedKeyGenParams;
type EcKeyGenParams = crypto.webcrypto.EcKeyGenParams;

export type KeyKind = 'rsa2048' | 'rsa1024' | 'p256' | 'p384';

export interface IssuedCertificate {
  certificatePem: string;
  privateKeyPem: string;
  serialNumber: string;
  /** SHA-256 of the DER certificate as Node prints it: upper-case hex pairs joined by colons. */
  fingerprint256: string;
  /** The same, lower-case hex without colons: how the proxy forwards it (X-Client-Cert-Fingerprint). */
  fingerprintHex: string;
}

/** Names and key of a leaf certificate. */
export interface LeafOptions {
  commonName: string;
  /** An `O=` attribute after the common name in the subject. */
  organization?: string;
  dnsNames?: string[];
  ipAddresses?: string[];
  key?: KeyKind;
  notBefore?: Date;
  notAfter?: Date;
  /** A client certificate (extendedKeyUsage clientAuth) instead of a server one. */
  client?: boolean;
}

const DAY = 24 * 3600 * 1000;

function algorithmOf(kind: KeyKind): RsaHashedKeyGenParams | EcKeyGenParams {
  switch (kind) {
    case 'rsa2048':
    case 'rsa1024':
      return {
        name: 'RSASSA-PKCS1-v1_5',
        modulusLength: kind === 'rsa2048' ? 2048 : 1024,
        publicExponent: new Uint8Array([1, 0, 1]),
        hash: 'SHA-256',
      };
    case 'p256':
      return { name: 'ECDSA', namedCurve: 'P-256' };
    case 'p384':
      return { name: 'ECDSA', namedCurve: 'P-384' };
  }
}

function signingAlgorithm(key: CryptoKey): Algorithm | EcdsaParams {
  return key.algorithm.name === 'ECDSA' ? ({ name: 'ECDSA', hash: 'SHA-256' } as EcdsaParams) : { name: 'RSASSA-PKCS1-v1_5' };
}

async function generateKeys(kind: KeyKind): Promise<CryptoKeyPair> {
  return (await crypto.webcrypto.subtle.generateKey(algorithmOf(kind), true, ['sign', 'verify'])) as CryptoKeyPair;
}

async function privateKeyPem(key: CryptoKey): Promise<string> {
  const der = Buffer.from(await crypto.webcrypto.subtle.exportKey('pkcs8', key));
  return crypto.createPrivateKey({ key: der, format: 'der', type: 'pkcs8' }).export({ format: 'pem', type: 'pkcs8' }).toString();
}

const randomSerial = () => `01${crypto.randomBytes(15).toString('hex')}`;

/** RFC 4514 escaping of one attribute value, so that any common name stays one attribute. */
function escapeDnValue(value: string): string {
  return value
    .replace(/[\\,+"<>;=]/g, (c) => `\\${c}`)
    .replace(/^([ #])/, '\\$1')
    .replace(/ $/, '\\ ');
}

function subjectOf(options: Pick<LeafOptions, 'commonName' | 'organization'>): string {
  const commonName = `CN=${escapeDnValue(options.commonName)}`;
  return options.organization === undefined ? commonName : `${commonName}, O=${escapeDnValue(options.organization)}`;
}

function leafExtensions(options: LeafOptions): x509.Extension[] {
  const names = [
    ...(options.dnsNames ?? []).map((value) => ({ type: 'dns' as const, value })),
    ...(options.ipAddresses ?? []).map((value) => ({ type: 'ip' as const, value })),
  ];
  return [
    new x509.BasicConstraintsExtension(false, undefined, true),
    new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
    new x509.ExtendedKeyUsageExtension([options.client ? x509.ExtendedKeyUsage.clientAuth : x509.ExtendedKeyUsage.serverAuth]),
    ...(names.length ? [new x509.SubjectAlternativeNameExtension(names)] : []),
  ];
}

async function issued(certificate: x509.X509Certificate, privateKey: CryptoKey, serialNumber: string): Promise<IssuedCertificate> {
  const certificatePem = `${certificate.toString('pem')}\n`;
  const fingerprint256 = new crypto.X509Certificate(certificatePem).fingerprint256;
  return {
    certificatePem,
    privateKeyPem: await privateKeyPem(privateKey),
    serialNumber,
    fingerprint256,
    fingerprintHex: fingerprint256.replaceAll(':', '').toLowerCase(),
  };
}

export class TestCa {
  readonly name: string;
  readonly certificate: x509.X509Certificate;
  readonly keys: CryptoKeyPair;
  readonly parent: TestCa | undefined;
  readonly #revoked: string[] = [];

  private constructor(name: string, certificate: x509.X509Certificate, keys: CryptoKeyPair, parent: TestCa | undefined) {
    this.name = name;
    this.certificate = certificate;
    this.keys = keys;
    this.parent = parent;
  }

  static async create(commonName = 'TPS Test Root CA', kind: KeyKind = 'p256'): Promise<TestCa> {
    const keys = await generateKeys(kind);
    const certificate = await x509.X509CertificateGenerator.createSelfSigned({
      serialNumber: randomSerial(),
      name: `CN=${commonName}`,
      notBefore: new Date(Date.now() - DAY),
      notAfter: new Date(Date.now() + 3650 * DAY),
      keys,
      signingAlgorithm: signingAlgorithm(keys.privateKey),
      extensions: [
        new x509.BasicConstraintsExtension(true, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      ],
    });
    return new TestCa(commonName, certificate, keys, undefined);
  }

  /** An intermediate CA signed by this one. */
  async intermediate(commonName: string): Promise<TestCa> {
    const keys = await generateKeys('p256');
    const certificate = await x509.X509CertificateGenerator.create({
      serialNumber: randomSerial(),
      subject: `CN=${commonName}`,
      issuer: this.certificate.subject,
      notBefore: new Date(Date.now() - DAY),
      notAfter: new Date(Date.now() + 1825 * DAY),
      publicKey: keys.publicKey,
      signingKey: this.keys.privateKey,
      signingAlgorithm: signingAlgorithm(this.keys.privateKey),
      extensions: [
        new x509.BasicConstraintsExtension(true, 0, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
        await x509.AuthorityKeyIdentifierExtension.create(this.certificate),
      ],
    });
    return new TestCa(commonName, certificate, keys, this);
  }

  get certificatePem(): string {
    return `${this.certificate.toString('pem')}\n`;
  }

  /** This CA and its parents up to (not including) the root: what a server sends after its leaf. */
  get chainPem(): string {
    return this.parent ? this.certificatePem + this.parent.chainPem : '';
  }

  async issue(options: LeafOptions): Promise<IssuedCertificate> {
    const keys = await generateKeys(options.key ?? 'p256');
    const serialNumber = randomSerial();
    const certificate = await x509.X509CertificateGenerator.create({
      serialNumber,
      subject: subjectOf(options),
      issuer: this.certificate.subject,
      notBefore: options.notBefore ?? new Date(Date.now() - DAY),
      notAfter: options.notAfter ?? new Date(Date.now() + 365 * DAY),
      publicKey: keys.publicKey,
      signingKey: this.keys.privateKey,
      signingAlgorithm: signingAlgorithm(this.keys.privateKey),
      extensions: [...leafExtensions(options), await x509.AuthorityKeyIdentifierExtension.create(this.certificate)],
    });
    return issued(certificate, keys.privateKey, serialNumber);
  }

  revoke(serialNumber: string): void {
    this.#revoked.push(serialNumber);
  }

  /** The current revocation list of this CA, PEM. */
  async crlPem(): Promise<string> {
    const crl = await x509.X509CrlGenerator.create({
      issuer: this.certificate.subject,
      thisUpdate: new Date(Date.now() - 60_000),
      nextUpdate: new Date(Date.now() + 7 * DAY),
      entries: this.#revoked.map((serialNumber) => ({ serialNumber, revocationDate: new Date(Date.now() - 60_000) })),
      signingKey: this.keys.privateKey,
      signingAlgorithm: signingAlgorithm(this.keys.privateKey),
      extensions: [await x509.AuthorityKeyIdentifierExtension.create(this.certificate)],
    });
    // Node's TLS reads CRLs labelled "X509 CRL" (OpenSSL's PEM name); @peculiar/x509 writes "CRL".
    return `${crl.toString('pem').replace(/-----(BEGIN|END) CRL-----/g, '-----$1 X509 CRL-----')}\n`;
  }
}

/** A self-signed leaf certificate: no CA vouches for it. */
export async function selfSigned(options: LeafOptions): Promise<IssuedCertificate> {
  const keys = await generateKeys(options.key ?? 'p256');
  const serialNumber = randomSerial();
  const certificate = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber,
    name: subjectOf(options),
    notBefore: options.notBefore ?? new Date(Date.now() - DAY),
    notAfter: options.notAfter ?? new Date(Date.now() + 365 * DAY),
    keys,
    signingAlgorithm: signingAlgorithm(keys.privateKey),
    extensions: leafExtensions(options),
  });
  return issued(certificate, keys.privateKey, serialNumber);
}

/** A fresh folder under the system's temporary one, and how to remove it. */
export function tempDir(prefix: string): { dir: string; remove(): void } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `tps-${prefix}-`));
  return { dir, remove: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

/** Writes `pem` to `dir/name` and returns the path, for tools that read certificates from files. */
export function writePemFile(dir: string, name: string, pem: string): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, pem, { mode: 0o600 });
  return file;
}
