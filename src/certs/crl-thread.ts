/**
 * The thread that parses and checks CRLs for the CRL service (crl-verifier.ts): a list of tens of
 * thousands of entries takes its time in JavaScript's ASN.1, and that time must not be taken from
 * the event loop that answers the API.
 */
import { parentPort } from 'node:worker_threads';
import { CrlError, verifyCrl } from './crl-verify.ts';
import type { CrlJob, CrlJobResult } from './crl-verifier.ts';

const port = parentPort!;
port.on('message', (job: CrlJob) => {
  void verifyCrl(Buffer.from(job.data), job.caPem).then(
    (crl) => port.postMessage({ id: job.id, crl } satisfies CrlJobResult),
    (error: unknown) =>
      port.postMessage({
        id: job.id,
        error: error instanceof Error ? error.message : String(error),
        problem: error instanceof CrlError ? error.problem : undefined,
      } satisfies CrlJobResult),
  );
});
