/**
 * The origin's compressed response body, decoded for the WAF's response rules only: they must read
 * what the client will read, not gzip bytes (an SQL error page sent compressed is still a leak).
 * The client still gets the origin's bytes as they are.
 *
 * Bounded: the decoders stream, and decoding stops once `limit` bytes are out (the WAF reads no
 * more), so a small body that inflates to gigabytes (a "zip bomb") costs at most `limit` bytes plus
 * one decoder chunk, whatever its ratio. A body that ends early (the held part of a longer one) or
 * is corrupt yields what decoded up to there: a client cannot read past that point either.
 *
 * Codings: gzip (x-gzip), deflate (zlib-wrapped or raw, as browsers take both), br, zstd; stacked
 * ones (`gzip, br`) undone in reverse order, two at most. Any other coding cannot be inspected
 * (`contentCodings` answers undefined): the WAF's failMode decides, as for any response it cannot
 * read. A client that asks for an exotic coding only harms its own response that way.
 */
import { type Transform, pipeline } from 'node:stream';
import zlib from 'node:zlib';

const MAX_STACKED_CODINGS = 2;
const DECODABLE = new Set(['gzip', 'x-gzip', 'deflate', 'br', 'zstd']);

/**
 * The codings a Content-Encoding value lists, in the order applied (`identity` left out): [] for
 * none, undefined when one of them cannot be decoded here.
 */
export function contentCodings(value: string | undefined): string[] | undefined {
  if (value === undefined) return [];
  const codings: string[] = [];
  for (const token of value.split(',')) {
    const coding = token.trim().toLowerCase();
    if (coding === '' || coding === 'identity') continue;
    if (!DECODABLE.has(coding)) return undefined;
    codings.push(coding);
  }
  return codings.length > MAX_STACKED_CODINGS ? undefined : codings;
}

function decoder(coding: string, firstBytes: Buffer | undefined): Transform {
  switch (coding) {
    case 'br':
      return zlib.createBrotliDecompress({ finishFlush: zlib.constants.BROTLI_OPERATION_FLUSH });
    case 'zstd':
      return zlib.createZstdDecompress();
    case 'deflate':
      // RFC 9110 says zlib format (RFC 1950); some servers send raw deflate, which browsers take too.
      return firstBytes === undefined || isZlibHeader(firstBytes)
        ? zlib.createInflate({ finishFlush: zlib.constants.Z_SYNC_FLUSH })
        : zlib.createInflateRaw({ finishFlush: zlib.constants.Z_SYNC_FLUSH });
    default:
      return zlib.createGunzip({ finishFlush: zlib.constants.Z_SYNC_FLUSH });
  }
}

function isZlibHeader(bytes: Buffer): boolean {
  return bytes.length >= 2 && (bytes[0]! & 0x0f) === 8 && ((bytes[0]! << 8) | bytes[1]!) % 31 === 0;
}

export interface DecodedBody {
  /** At most `limit` bytes of the decoded body. */
  body: Buffer;
  /** The decoded body goes on past `body` (or could not be decoded to its end). */
  truncated: boolean;
}

/** The first `limit` bytes of `body` decoded (`codings` as `contentCodings` gave them, non-empty). */
export function decodeForInspection(body: Buffer, codings: readonly string[], limit: number): Promise<DecodedBody> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let length = 0;
    let done = false;
    // Undone last-applied first. An inner deflate stage is taken as RFC 9110's zlib format (its bytes are not seen yet).
    const stages = [...codings].reverse().map((coding, i) => decoder(coding, i === 0 ? body : undefined));
    const finish = (truncated: boolean): void => {
      if (done) return;
      done = true;
      for (const stage of stages) stage.destroy();
      const out = Buffer.concat(chunks, length);
      resolve({ body: out.length > limit ? out.subarray(0, limit) : out, truncated: truncated || out.length > limit });
    };
    const last = stages[stages.length - 1]!;
    last.on('data', (chunk: Buffer) => {
      if (done) return;
      chunks.push(chunk);
      length += chunk.length;
      // Enough for the WAF: stop decoding (the rest is never inflated, however large it would grow).
      if (length >= limit) finish(true);
    });
    if (stages.length > 1) pipeline(stages[0]!, stages[1]!, () => {});
    for (const stage of stages) stage.on('error', () => finish(true));
    last.on('end', () => finish(false));
    stages[0]!.end(body);
  });
}
