/**
 * Parsing and checking a CRL against its CA: pure, and CPU-bound on a large list (ASN.1 in
 * JavaScript), so the CRL service runs it in a thread of its own (crl-verifier.ts), never on the
 * event loop that serves the API.
 */
import crypto from 'node:crypto';
// @peculiar/x509 resolves its algorithms through tsyringe, which needs the Reflect metadata polyfill first.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';

// `as never`: Node's WebCrypto is the Crypto @peculiar/x509 wants, whichever lib typings are loaded.
x509.cryptoProvider.set(crypto.webcrypto as never);

export interface VerifiedCrl {
  pem: string;
  thisUpdate: string;
  nextUpdate: string | null;
  /** Serial numbers of the revoked certificates, lower-case hex as the CRL holds them. */
  revokedSerials: string[];
}

/** What is wrong with a CRL: the bytes are no CRL at all, or a CRL that is not this CA's. */
export type CrlProblem = 'not-a-crl' | 'not-this-ca';

export class CrlError extends Error {
  readonly problem: CrlProblem;
  constructor(message: string, problem: CrlProblem = 'not-this-ca') {
    super(message);
    this.problem = problem;
  }
}

/**
 * Parses a CRL (DER or PEM) and checks it was issued and signed by the CA `caPem`.
 * Throws CrlError saying what is wrong.
 */
export async function verifyCrl(data: Buffer | string, caPem: string): Promise<VerifiedCrl> {
  let crl: x509.X509Crl;
  try {
    const text = typeof data === 'string' ? data : data.toString('latin1');
    const pem = PEM_CRL.exec(text);
    const der = pem ? Buffer.from(pem[1]!.replace(/\s+/g, ''), 'base64') : typeof data === 'string' ? Buffer.from(data, 'latin1') : data;
    // The ASN.1 parser stops at 10,000 nodes unless told otherwise, about 3,000 revoked
    // certificates. Every node takes at least two bytes, so half the size lets any list through
    // whole; what bounds the work is the fetch's size limit and the thread's heap (crl-verifier.ts).
    crl = new x509.X509Crl(Uint8Array.from(der), { berOptions: { maxNodes: Math.max(10_000, Math.ceil(der.length / 2)) } });
  } catch (error) {
    throw new CrlError(`not a certificate revocation list (${(error as Error).message})`, 'not-a-crl');
  }
  const ca = new x509.X509Certificate(caPem);
  if (!sameName(crl.issuerName, ca.subjectName)) {
    throw new CrlError(`the CRL was issued by "${crl.issuer}", not by the CA "${ca.subject}"`);
  }
  let signed = false;
  try {
    signed = await crl.verify({ publicKey: ca.publicKey });
  } catch {
    signed = false;
  }
  if (!signed) throw new CrlError(`the CRL's signature does not verify with the key of the CA "${ca.subject}"`);
  return {
    pem: crlPem(crl.rawData),
    thisUpdate: crl.thisUpdate.toISOString(),
    nextUpdate: crl.nextUpdate?.toISOString() ?? null,
    revokedSerials: crl.entries.map((entry) => entry.serialNumber.toLowerCase()),
  };
}

const PEM_CRL = /-----BEGIN (?:X509 )?CRL-----([\s\S]+?)-----END (?:X509 )?CRL-----/;

/** PEM with the label OpenSSL (and so node:tls `crl`) reads: "X509 CRL". */
export function crlPem(der: ArrayBuffer | Buffer): string {
  const base64 = Buffer.from(der as ArrayBuffer).toString('base64');
  return `-----BEGIN X509 CRL-----\n${base64.match(/.{1,64}/g)!.join('\n')}\n-----END X509 CRL-----\n`;
}

function sameName(a: x509.Name, b: x509.Name): boolean {
  return Buffer.from(a.toArrayBuffer()).equals(Buffer.from(b.toArrayBuffer())) || a.toString() === b.toString();
}
