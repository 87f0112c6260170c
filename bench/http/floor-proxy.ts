/**
 * The floor of an HTTP/1.1 proxy on Node: the least a keep-alive reverse proxy does per request,
 * with the leanest parts Node offers, and nothing of the product. It measures what any JavaScript
 * data path costs here, whatever its design, beside nginx in the same rounds (bench/http,
 * BENCH_FLOOR=1). Not a proxy to run: no limits, timeouts, phases, errors or bodies in requests.
 *
 * What it does per request: reads the client on a bare libuv handle (no net.Socket, the accept and
 * reads of src/edge/l4/tcp-sides.ts), parses the head with Node's own llhttp (`HTTPParser`, as
 * node:http does), writes the head with the four headers both proxies add to a pooled keep-alive
 * origin connection (bare handle too), parses the answer with llhttp and writes head and body to
 * the client in one write. With `"front":"node:http"` the same proxy reads its clients with
 * node:http (a request and a response object each, as the product's front end does) instead: the
 * two sides tell what the front end costs, and the product against this one what the rest costs.
 *
 *   node bench/http/floor-proxy.ts '{"origin":"127.0.0.60:8080","listen":{"ip":"127.0.0.64","port":8082}}'
 *
 * Prints "ready" on stdout once it listens; stops on SIGTERM.
 */
import { createRequire } from 'node:module';
import http from 'node:http';
import net from 'node:net';
import { type AcceptedTcp, acceptHandles, connectOrigin, type TcpSide, takeAccepted } from '../../src/edge/l4/tcp-sides.ts';
import { permissiveOriginGuard } from '../../test/support/origin-guard.ts';
import { splitAddress } from '../support/net.ts';

/** What is used of llhttp's binding (`_http_common`'s HTTPParser; its callbacks sit at numeric keys). */
interface LlhttpParser {
  initialize(type: number, resource: object, maxHeaderSize: number, lenientFlags: number): void;
  execute(data: Uint8Array): number | Error;
  [callback: number]: unknown;
}
interface LlhttpParserClass {
  new (): LlhttpParser;
  REQUEST: number;
  RESPONSE: number;
  kOnHeadersComplete: number;
  kOnBody: number;
  kOnMessageComplete: number;
}
type OnHeadersComplete = (
  versionMajor: number,
  versionMinor: number,
  headers: string[],
  method: number,
  url: string,
  statusCode: number,
  statusMessage: string,
) => number;

const { HTTPParser } = createRequire(import.meta.url)('_http_common') as { HTTPParser: LlhttpParserClass };
const METHODS = (createRequire(import.meta.url)('_http_common') as { methods: string[] }).methods;
const args = JSON.parse(process.argv[2] ?? '') as {
  origin: string;
  listen: { ip: string; port: number };
  /** The front end: bare handles and llhttp (default), or node:http (the origin side stays the same). */
  front?: 'handles' | 'node:http';
};
const [originHost, originPort] = splitAddress(args.origin);
const guard = permissiveOriginGuard().for('floor');
/** Headers that are the hop's own, dropped both ways (the product's list is longer). */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'upgrade', 'trailer']);
const noop = (): void => {};

/** The request head as sent on: the client's headers minus hop-by-hop ones, plus the forwarding four. */
function forwardedHead(method: string, url: string, headers: string[], clientIp: string, requestId: number): string {
  let head = `${method} ${url} HTTP/1.1\r\n`;
  let host = '';
  for (let i = 0; i < headers.length; i += 2) {
    const name = headers[i]!.toLowerCase();
    if (name === 'host') host = headers[i + 1]!;
    if (HOP_BY_HOP.has(name)) continue;
    head += `${headers[i]}: ${headers[i + 1]}\r\n`;
  }
  const id = requestId.toString(16).padStart(32, '0');
  return `${head}x-forwarded-for: ${clientIp}\r\nx-forwarded-proto: http\r\nx-forwarded-host: ${host}\r\nx-request-id: ${id}\r\n\r\n`;
}

/** Where an origin's answer goes: the status, its headers (hop-by-hop ones dropped, flat) and the body. */
type Deliver = (status: number, message: string, headers: string[], body: Buffer) => void;

class OriginConnection {
  readonly side: TcpSide;
  readonly parser = new HTTPParser();
  deliver: Deliver | undefined;
  status = 0;
  message = '';
  headers: string[] = [];
  chunks: Buffer[] = [];
  gone = false;
  private readonly buffer = Buffer.allocUnsafe(65_536);
  private readonly idle: OriginConnection[];

  constructor(idle: OriginConnection[]) {
    this.idle = idle;
    this.parser.initialize(HTTPParser.RESPONSE, {}, 0, 0);
    this.parser[HTTPParser.kOnHeadersComplete] = ((_major, _minor, headers, _method, _url, status, message) => {
      const kept: string[] = [];
      for (let i = 0; i < headers.length; i += 2) {
        if (!HOP_BY_HOP.has(headers[i]!.toLowerCase())) kept.push(headers[i]!, headers[i + 1]!);
      }
      this.status = status;
      this.message = message;
      this.headers = kept;
      this.chunks = [];
      return 0;
    }) satisfies OnHeadersComplete;
    this.parser[HTTPParser.kOnBody] = (chunk: Buffer) => this.chunks.push(chunk);
    this.parser[HTTPParser.kOnMessageComplete] = () => this.answer();
    const lost = (): void => {
      this.gone = true;
      const at = this.idle.indexOf(this);
      if (at >= 0) this.idle.splice(at, 1);
    };
    this.side = connectOrigin(
      guard,
      originHost,
      originPort,
      { buffer: this.buffer, onRead: (bytes) => this.parse(bytes), onChunk: () => true },
      { onConnect: noop, onEnd: lost, onError: lost, onClose: lost },
    );
    this.side.resume();
  }

  /** Sends a request head on; its answer goes to `deliver`. */
  send(head: string, deliver: Deliver): void {
    this.deliver = deliver;
    this.side.write(Buffer.from(head, 'latin1'), noop);
  }

  private parse(bytes: number): boolean {
    this.parser.execute(this.buffer.subarray(0, bytes));
    return true;
  }

  private answer(): void {
    const deliver = this.deliver!;
    this.deliver = undefined;
    deliver(this.status, this.message, this.headers, this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks));
    if (!this.gone) this.idle.push(this);
  }
}

const idle: OriginConnection[] = [];
let requests = 0;
/** A new client on its bare handle: read into its own buffer, parsed by its own parser. */
function serve(accepted: AcceptedTcp): true {
  const buffer = Buffer.allocUnsafe(16_384);
  const parser = new HTTPParser();
  parser.initialize(HTTPParser.REQUEST, {}, 0, 0);
  const client: TcpSide = takeAccepted(
    accepted,
    {
      buffer,
      onRead: (bytes) => {
        parser.execute(buffer.subarray(0, bytes));
        return true;
      },
      onChunk: () => true,
    },
    { onEnd: () => client.destroy(), onError: noop, onClose: noop },
  );
  const deliver: Deliver = (status, message, headers, body) => {
    let head = `HTTP/1.1 ${status} ${message}\r\n`;
    for (let i = 0; i < headers.length; i += 2) head += `${headers[i]}: ${headers[i + 1]}\r\n`;
    head += '\r\n';
    const out = Buffer.allocUnsafe(head.length + body.length);
    out.write(head, 0, 'latin1');
    body.copy(out, head.length);
    client.write(out, noop);
  };
  parser[HTTPParser.kOnHeadersComplete] = ((_major, _minor, headers, method, url) => {
    const origin = idle.pop() ?? new OriginConnection(idle);
    origin.send(forwardedHead(METHODS[method] ?? 'GET', url, headers, accepted.ip, ++requests), deliver);
    return 0;
  }) satisfies OnHeadersComplete;
  parser[HTTPParser.kOnBody] = noop;
  parser[HTTPParser.kOnMessageComplete] = noop;
  client.resume();
  return true;
}

/** The same proxy with node:http as its front end (what the product's front end is): a request and a response object each. */
function nodeHttpFront(): http.Server {
  return http.createServer({ noDelay: true, optimizeEmptyRequests: true }, (req, res) => {
    const origin = idle.pop() ?? new OriginConnection(idle);
    origin.send(
      forwardedHead(req.method ?? 'GET', req.url ?? '/', req.rawHeaders, req.socket.remoteAddress ?? '', ++requests),
      (status, _message, headers, body) => {
        res.writeHead(status, headers);
        res.end(body);
      },
    );
  });
}

// The bare front end takes every connection on its handle: net's own sockets are never made.
const server = args.front === 'node:http' ? nodeHttpFront() : net.createServer({ noDelay: true }, (socket) => socket.destroy());
server.listen(args.listen.port, args.listen.ip, () => {
  if (args.front !== 'node:http') acceptHandles(server, serve);
  process.stdout.write('ready\n');
});
process.on('SIGTERM', () => process.exit(0));
