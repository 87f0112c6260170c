/**
 * One HTTP/2 request written frame by frame over TLS, with any header fields at all: Node's own
 * client refuses to send what RFC 9113 forbids (connection-specific fields, `te: gzip`), which is
 * exactly what a test of the server's refusals must send. Fields are HPACK literals without
 * indexing and without Huffman coding; of the answer only the outcome is read.
 */
import tls from 'node:tls';

export interface RawH2Options {
  host: string;
  port: number;
  ca: string;
  servername: string;
  /** In order, pseudo-header fields first; names are sent as given (lower-case them yourself). */
  headers: [name: string, value: string][];
  /** DATA to send after the HEADERS frame (the stream ends with it); none: HEADERS ends the stream. */
  body?: Buffer;
  /** How long to wait for an answer. Default 10 s. */
  timeoutMs?: number;
}

export type RawH2Outcome =
  /** A response head: its status when HPACK coded it as a static-table entry (200, 204, 206, 304, 400, 404, 500), else 0. */
  | { kind: 'response'; status: number }
  /** RST_STREAM on the request's stream, with its error code (1 = PROTOCOL_ERROR). */
  | { kind: 'reset'; code: number }
  /** GOAWAY: the whole connection ended (its error code). */
  | { kind: 'goaway'; code: number }
  | { kind: 'closed' }
  | { kind: 'timeout' };

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
const TYPE_DATA = 0x0;
const TYPE_HEADERS = 0x1;
const TYPE_RST_STREAM = 0x3;
const TYPE_SETTINGS = 0x4;
const TYPE_GOAWAY = 0x7;
const FLAG_END_STREAM = 0x1;
const FLAG_END_HEADERS = 0x4;
const FLAG_ACK = 0x1;
const STREAM = 1;
/** HPACK static table: :status entries (RFC 7541 appendix A). */
const STATIC_STATUS: Record<number, number> = { 8: 200, 9: 204, 10: 206, 11: 304, 12: 400, 13: 404, 14: 500 };

/** An HPACK integer with an N-bit prefix (RFC 7541 5.1), `first` holding the bits above the prefix. */
function hpackInteger(value: number, prefixBits: number, first: number): number[] {
  const max = (1 << prefixBits) - 1;
  if (value < max) return [first | value];
  const out = [first | max];
  let rest = value - max;
  while (rest >= 128) {
    out.push((rest % 128) + 128);
    rest = Math.floor(rest / 128);
  }
  out.push(rest);
  return out;
}

function literal(name: string, value: string): Buffer {
  const n = Buffer.from(name, 'latin1');
  const v = Buffer.from(value, 'latin1');
  return Buffer.concat([Buffer.from([0x00, ...hpackInteger(n.length, 7, 0)]), n, Buffer.from(hpackInteger(v.length, 7, 0)), v]);
}

function frame(type: number, flags: number, streamId: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(streamId & 0x7fffffff, 5);
  return Buffer.concat([head, payload]);
}

export function rawH2Request(options: RawH2Options): Promise<RawH2Outcome> {
  return new Promise((resolve) => {
    const socket = tls.connect({
      host: options.host,
      port: options.port,
      ca: options.ca,
      servername: options.servername,
      ALPNProtocols: ['h2'],
    });
    let received = Buffer.alloc(0);
    let done = false;
    const finish = (outcome: RawH2Outcome): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(outcome);
    };
    const timer = setTimeout(() => finish({ kind: 'timeout' }), options.timeoutMs ?? 10_000);
    socket.on('error', () => finish({ kind: 'closed' }));
    socket.on('close', () => finish({ kind: 'closed' }));
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      while (received.length >= 9) {
        const length = received.readUIntBE(0, 3);
        if (received.length < 9 + length) break;
        const type = received[3]!;
        const flags = received[4]!;
        const streamId = received.readUInt32BE(5) & 0x7fffffff;
        const payload = received.subarray(9, 9 + length);
        received = received.subarray(9 + length);
        if (type === TYPE_SETTINGS && (flags & FLAG_ACK) === 0) socket.write(frame(TYPE_SETTINGS, FLAG_ACK, 0, Buffer.alloc(0)));
        else if (type === TYPE_GOAWAY && payload.length >= 8 && payload.readUInt32BE(4) !== 0)
          finish({ kind: 'goaway', code: payload.readUInt32BE(4) });
        else if (type === TYPE_RST_STREAM && streamId === STREAM) finish({ kind: 'reset', code: payload.readUInt32BE(0) });
        else if (type === TYPE_HEADERS && streamId === STREAM) {
          const first = payload[0] ?? 0;
          finish({ kind: 'response', status: (first & 0x80) !== 0 ? (STATIC_STATUS[first & 0x7f] ?? 0) : 0 });
        }
      }
    });
    socket.once('secureConnect', () => {
      const block = Buffer.concat(options.headers.map(([name, value]) => literal(name, value)));
      const body = options.body;
      const frames = [
        PREFACE,
        frame(TYPE_SETTINGS, 0, 0, Buffer.alloc(0)),
        frame(TYPE_HEADERS, FLAG_END_HEADERS | (body === undefined ? FLAG_END_STREAM : 0), STREAM, block),
      ];
      if (body !== undefined) frames.push(frame(TYPE_DATA, FLAG_END_STREAM, STREAM, body));
      socket.write(Buffer.concat(frames));
    });
  });
}
