/**
 * A tiny DNS server on a loopback address (UDP), answering A and AAAA questions from a map the test
 * sets: with TPS_ORIGIN_RESOLVER pointing at it, a test decides what a tenant's origin name resolves
 * to (`evil.test` -> 169.254.169.254, or the API's own address). Every answer has TTL 0, so a changed
 * map is seen at the next question. A name not in the map is NXDOMAIN; a name without records of
 * the asked type answers no records (NODATA). Enough of RFC 1035 for c-ares and nothing more.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import { parseIpInto } from '../../src/net/ip-set.ts';

export interface TestDns {
  /** `ip:port`, as TPS_ORIGIN_RESOLVER takes it. */
  readonly server: string;
  /** Names asked, in order (lower case). */
  readonly questions: string[];
  /** Makes `name` resolve to `addresses` (IPv4 and/or IPv6); an empty list removes it. */
  set(name: string, addresses: readonly string[]): void;
  close(): Promise<void>;
}

const TYPE_A = 1;
const TYPE_AAAA = 28;

export async function startTestDns(address: string, records: Record<string, readonly string[]> = {}): Promise<TestDns> {
  const zone = new Map<string, readonly string[]>();
  const set = (name: string, addresses: readonly string[]) => {
    const key = name.toLowerCase().replace(/\.$/, '');
    if (addresses.length === 0) zone.delete(key);
    else zone.set(key, addresses);
  };
  for (const [name, addresses] of Object.entries(records)) set(name, addresses);
  const questions: string[] = [];
  const socket = dgram.createSocket(net.isIPv6(address) ? 'udp6' : 'udp4');
  socket.on('message', (query, peer) => {
    const answer = respond(query, zone, questions);
    if (answer !== undefined) socket.send(answer, peer.port, peer.address);
  });
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.bind(0, address, () => {
      socket.off('error', reject);
      resolve();
    });
  });
  const { port } = socket.address();
  return {
    server: net.isIPv6(address) ? `[${address}]:${port}` : `${address}:${port}`,
    questions,
    set,
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}

function respond(query: Buffer, zone: Map<string, readonly string[]>, questions: string[]): Buffer | undefined {
  if (query.length < 12 || query.readUInt16BE(4) !== 1) return undefined;
  // The question: labels up to the root, then type and class.
  const labels: string[] = [];
  let offset = 12;
  for (;;) {
    const length = query[offset];
    if (length === undefined || length > 63) return undefined;
    offset++;
    if (length === 0) break;
    labels.push(query.toString('latin1', offset, offset + length));
    offset += length;
  }
  if (offset + 4 > query.length) return undefined;
  const type = query.readUInt16BE(offset);
  const question = query.subarray(12, offset + 4);
  const name = labels.join('.').toLowerCase();
  questions.push(name);

  const known = zone.get(name);
  const family = type === TYPE_A ? 4 : type === TYPE_AAAA ? 6 : 0;
  const addresses = (known ?? []).filter((candidate) => net.isIP(candidate) === family);
  const answers = addresses.map((candidate) => {
    const data = addressBytes(candidate);
    const record = Buffer.alloc(12 + data.length);
    record.writeUInt16BE(0xc00c, 0); // the name: a pointer to the question's
    record.writeUInt16BE(type, 2);
    record.writeUInt16BE(1, 4); // class IN
    record.writeUInt32BE(0, 6); // TTL 0: never cached
    record.writeUInt16BE(data.length, 10);
    data.copy(record, 12);
    return record;
  });
  const header = Buffer.alloc(12);
  header.writeUInt16BE(query.readUInt16BE(0), 0); // id
  const recursionDesired = query.readUInt16BE(2) & 0x0100;
  header.writeUInt16BE(0x8080 | recursionDesired | (known === undefined ? 3 : 0), 2); // response, RA, NXDOMAIN or NOERROR
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(answers.length, 6);
  return Buffer.concat([header, question, ...answers]);
}

function addressBytes(address: string): Buffer {
  const words = new Uint32Array(4);
  const family = parseIpInto(address, words);
  const bytes = Buffer.alloc(16);
  for (let i = 0; i < 4; i++) bytes.writeUInt32BE(words[i]!, 4 * i);
  return family === 4 ? bytes.subarray(12) : bytes;
}
