/**
 * Test support for the layer 4 proxy: origins that echo (and read PROXY protocol headers the way a
 * real origin would, with a parser written here from the specification, independent of the
 * encoder under test), clients on chosen loopback source addresses, and attribute builders.
 * Everything listens and connects on loopback only.
 */
import { createServer, connect, type Server, type Socket, type AddressInfo } from 'node:net';
import { createSocket, type Socket as DatagramSocket } from 'node:dgram';
import { createHash } from 'node:crypto';
import type { L4ProxyAttributes } from '@tps/model';

export interface ParsedProxyHeader {
  version: 1 | 2;
  command: 'PROXY' | 'LOCAL';
  /** 'TCP4' | 'TCP6' | 'UDP4' | 'UDP6' | 'UNKNOWN' */
  protocol: string;
  sourceAddress?: string;
  destinationAddress?: string;
  sourcePort?: number;
  destinationPort?: number;
  /** Bytes the header took; the payload follows. */
  length: number;
}

const V2_SIGNATURE = Buffer.from('0d0a0d0a000d0a515549540a', 'hex');

/**
 * Reads a PROXY protocol v1 or v2 header at the start of `data`: the header, 'INCOMPLETE' when more
 * bytes are needed, or 'NONE' when the data does not start with one.
 */
export function parseProxyHeader(data: Buffer): ParsedProxyHeader | 'INCOMPLETE' | 'NONE' {
  if (data.length >= 1 && data[0] === 0x0d) {
    if (data.length < 16) return V2_SIGNATURE.subarray(0, data.length).equals(data) ? 'INCOMPLETE' : 'NONE';
    if (!data.subarray(0, 12).equals(V2_SIGNATURE)) return 'NONE';
    const versionCommand = data[12]!;
    const familyTransport = data[13]!;
    const addressLength = data.readUInt16BE(14);
    if (data.length < 16 + addressLength) return 'INCOMPLETE';
    const command = (versionCommand & 0x0f) === 1 ? 'PROXY' : 'LOCAL';
    const length = 16 + addressLength;
    const family = familyTransport >> 4;
    const transport = familyTransport & 0x0f;
    const name = `${transport === 1 ? 'TCP' : transport === 2 ? 'UDP' : '?'}${family === 1 ? '4' : family === 2 ? '6' : '?'}`;
    if (command === 'LOCAL' || (family !== 1 && family !== 2)) return { version: 2, command, protocol: 'UNKNOWN', length };
    const body = data.subarray(16);
    if (family === 1) {
      return {
        version: 2,
        command,
        protocol: name,
        sourceAddress: [...body.subarray(0, 4)].join('.'),
        destinationAddress: [...body.subarray(4, 8)].join('.'),
        sourcePort: body.readUInt16BE(8),
        destinationPort: body.readUInt16BE(10),
        length,
      };
    }
    return {
      version: 2,
      command,
      protocol: name,
      sourceAddress: ipv6Text(body.subarray(0, 16)),
      destinationAddress: ipv6Text(body.subarray(16, 32)),
      sourcePort: body.readUInt16BE(32),
      destinationPort: body.readUInt16BE(34),
      length,
    };
  }
  const prefix = 'PROXY ';
  const head = data.subarray(0, Math.min(data.length, prefix.length)).toString('latin1');
  if (!prefix.startsWith(head)) return 'NONE';
  const end = data.indexOf('\r\n');
  if (end === -1) return data.length > 107 ? 'NONE' : 'INCOMPLETE';
  const fields = data.subarray(0, end).toString('latin1').split(' ');
  const length = end + 2;
  if (fields[1] === 'UNKNOWN') return { version: 1, command: 'PROXY', protocol: 'UNKNOWN', length };
  if (fields.length !== 6) return 'NONE';
  return {
    version: 1,
    command: 'PROXY',
    protocol: fields[1]!,
    sourceAddress: fields[2]!,
    destinationAddress: fields[3]!,
    sourcePort: Number(fields[4]),
    destinationPort: Number(fields[5]),
    length,
  };
}

/** Canonical-enough IPv6 text (each group in hex, longest zero run compressed) for comparisons. */
function ipv6Text(bytes: Buffer): string {
  const groups: number[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(bytes.readUInt16BE(i));
  let bestStart = -1;
  let bestLength = 0;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLength && j - i > 1) {
      bestStart = i;
      bestLength = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart === -1) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLength).join(':')}`;
}

export interface TcpOrigin {
  address: string;
  port: number;
  /** Connections accepted so far. */
  accepted: number;
  /** Connections open now. */
  readonly open: number;
  /** PROXY headers read, one per connection, in order (with `expectProxyHeader`). */
  headers: ParsedProxyHeader[];
  sockets: Set<Socket>;
  close(): Promise<void>;
}

/**
 * A TCP origin that echoes what it reads and ends its side when the client ends (so half-close is
 * visible). With `expectProxyHeader` it first reads the PROXY header and echoes only the payload.
 */
export async function startEchoOrigin(address: string, options: { expectProxyHeader?: boolean } = {}): Promise<TcpOrigin> {
  const sockets = new Set<Socket>();
  const origin: TcpOrigin = {
    address,
    port: 0,
    accepted: 0,
    get open() {
      return sockets.size;
    },
    headers: [],
    sockets,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
  const server: Server = createServer({ allowHalfOpen: true, noDelay: true }, (socket) => {
    origin.accepted++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    socket.on('end', () => socket.end());
    if (!options.expectProxyHeader) {
      socket.pipe(socket, { end: false });
      return;
    }
    let buffered = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      const header = parseProxyHeader(buffered);
      if (header === 'INCOMPLETE') return;
      socket.off('data', onData);
      if (header === 'NONE') {
        socket.destroy();
        return;
      }
      origin.headers.push(header);
      const rest = buffered.subarray(header.length);
      if (rest.length > 0) socket.write(rest);
      socket.pipe(socket, { end: false });
    };
    socket.on('data', onData);
  });
  await new Promise<void>((resolve) => server.listen(0, address, resolve));
  origin.port = (server.address() as AddressInfo).port;
  return origin;
}

export interface UdpOrigin {
  address: string;
  port: number;
  /** Datagrams received (payloads, header removed). */
  received: Buffer[];
  /** PROXY headers, one per datagram received (with `expectProxyHeader`). */
  headers: ParsedProxyHeader[];
  /** Source ports the datagrams came from (the proxy's upstream sockets). */
  peers: Set<string>;
  close(): Promise<void>;
}

/** A UDP origin that echoes each datagram's payload (after its PROXY header when expected). */
export async function startUdpEchoOrigin(address: string, options: { expectProxyHeader?: boolean } = {}): Promise<UdpOrigin> {
  const socket: DatagramSocket = createSocket(address.includes(':') ? 'udp6' : 'udp4');
  const origin: UdpOrigin = {
    address,
    port: 0,
    received: [],
    headers: [],
    peers: new Set(),
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
  socket.on('message', (message, rinfo) => {
    origin.peers.add(`${rinfo.address} ${rinfo.port}`);
    let payload = message;
    if (options.expectProxyHeader) {
      const header = parseProxyHeader(message);
      if (header === 'INCOMPLETE' || header === 'NONE') return;
      origin.headers.push(header);
      payload = message.subarray(header.length);
    }
    origin.received.push(payload);
    socket.send(payload, rinfo.port, rinfo.address);
  });
  await new Promise<void>((resolve) => socket.bind(0, address, resolve));
  origin.port = socket.address().port;
  return origin;
}

/**
 * Connects to `address:port`, from `localAddress` when given (any 127.0.0.0/8 address works). The
 * socket keeps its sending half open when the peer ends (to test half-close); pass
 * `allowHalfOpen: false` for a client that ends when the peer does.
 */
export function connectTo(
  address: string,
  port: number,
  localAddress?: string,
  options: { allowHalfOpen?: boolean } = {},
): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: address, port, localAddress, allowHalfOpen: options.allowHalfOpen ?? true, noDelay: true });
    socket.once('connect', () => {
      socket.off('error', reject);
      resolve(socket);
    });
    socket.once('error', reject);
  });
}

/** Everything the socket reads until its end; rejects on error. */
export function readToEnd(socket: Socket): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.once('end', () => resolve(Buffer.concat(chunks)));
    socket.once('error', reject);
  });
}

/** Reads until `count` bytes arrived (without waiting for the end). */
export function readBytes(socket: Socket, count: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    const onData = (chunk: Buffer) => {
      chunks.push(chunk);
      total += chunk.length;
      if (total >= count) {
        socket.off('data', onData);
        socket.off('error', reject);
        socket.pause();
        resolve(Buffer.concat(chunks));
      }
    };
    socket.on('data', onData);
    socket.once('error', reject);
    socket.resume();
  });
}

/**
 * Resolves with how the peer ended the connection: 'END' (its FIN; this side is then closed too),
 * or the error code (ECONNRESET...), or 'CLOSE'.
 */
export function waitForClose(socket: Socket): Promise<string> {
  return new Promise((resolve) => {
    if (socket.destroyed) {
      resolve('CLOSE');
      return;
    }
    let outcome = 'CLOSE';
    socket.once('end', () => {
      outcome = 'END';
      socket.destroy();
    });
    socket.once('error', (error: NodeJS.ErrnoException) => (outcome = error.code ?? 'ERROR'));
    socket.once('close', () => resolve(outcome));
    socket.resume();
  });
}

/**
 * What becomes of a connection that sends `message`: 'ECHO' when it comes back, else how it ended
 * ('ECONNRESET' for a refused connection, whether the reset beat the connect or not).
 */
export async function connectionOutcome(address: string, port: number, localAddress: string, message = 'x'): Promise<string> {
  let socket: Socket;
  try {
    socket = await connectTo(address, port, localAddress);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code ?? 'ERROR';
  }
  const closed = waitForClose(socket);
  socket.write(message, () => {});
  const echoed = new Promise<string>((resolve) => {
    let received = '';
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString();
      if (received === message) resolve('ECHO');
    });
  });
  const outcome = await Promise.race([echoed, closed]);
  socket.destroy();
  return outcome;
}

/** Sends one datagram from a fresh socket bound to `localAddress`, and waits for one reply. */
export async function udpExchange(
  address: string,
  port: number,
  payloads: Buffer[],
  options: { localAddress?: string; replyTimeoutMs?: number } = {},
): Promise<{ replies: Buffer[]; localPort: number }> {
  const socket = createSocket(address.includes(':') ? 'udp6' : 'udp4');
  await new Promise<void>((resolve) => socket.bind(0, options.localAddress ?? (address.includes(':') ? '::1' : '127.0.0.1'), resolve));
  const replies: Buffer[] = [];
  try {
    const done = new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, options.replyTimeoutMs ?? 2_000);
      socket.on('message', (reply) => {
        replies.push(reply);
        if (replies.length === payloads.length) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    for (const payload of payloads) socket.send(payload, port, address);
    await done;
    return { replies, localPort: socket.address().port };
  } finally {
    await new Promise<void>((resolve) => socket.close(() => resolve()));
  }
}

export function sha256(data: Buffer | Buffer[]): string {
  const hash = createHash('sha256');
  for (const part of Array.isArray(data) ? data : [data]) hash.update(part);
  return hash.digest('hex');
}

/** L4 proxy attributes with the schema's defaults, for a front end and origins on loopback. */
export function l4Attributes(
  frontend: { ipv4?: string; ipv6?: string; port: number },
  hosts: Array<{ address: string; port: number }>,
  overrides: Partial<L4ProxyAttributes> = {},
): L4ProxyAttributes {
  return {
    frontend,
    backend: { hosts, deliveryMethod: 'LEAST_CONNECTIONS' },
    protocols: ['TCP'],
    proxyProtocol: { enabled: false, version: 1 },
    threatIntelligence: { enabled: true },
    connectionLimits: { maxConnectionsPerSource: 512, maxNewConnectionsPerSecondPerSource: 200, maxConnections: 100_000 },
    ...overrides,
  };
}

/** Polls `condition` every 10 ms until it holds (the test's own timeout bounds the wait). */
export async function eventually(condition: () => boolean, what = 'condition'): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

export { freePort } from './ports.ts';
