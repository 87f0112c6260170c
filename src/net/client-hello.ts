/**
 * The TLS ClientHello of a fresh connection, read before the TLS server sees it: the SNI name and
 * the ALPN protocols offered. The bytes read stay in the socket (`unshift`), so the TLS server that
 * takes the connection afterwards sees the whole handshake. The proxies' TLS listeners use it to
 * tell an ACME TLS-ALPN-01 validation connection from a browser's (src/edge/http/tls-alpn-acme.ts).
 *
 * Hostile input: whatever the first bytes of a connection are, the parser answers, never throws,
 * and reads no more than one TLS record.
 */
import type net from 'node:net';
import { readPrefix } from './read-prefix.ts';

export interface ClientHelloInfo {
  /** SNI host name, if the client sent one. */
  servername: string | undefined;
  /** ALPN protocols the client offers, in its order. */
  alpnProtocols: string[];
}

/** Largest TLS record (2^14 bytes plus header and expansion): a ClientHello must fit in the first one. */
const MAX_RECORD = 16384 + 2048 + 5;

/**
 * Parses the first TLS record of a connection as a ClientHello. `'incomplete'`: more bytes are
 * needed; undefined: not a TLS ClientHello (or one split over several records, which real clients
 * do not do).
 */
export function parseClientHello(data: Buffer): ClientHelloInfo | 'incomplete' | undefined {
  if (data.length < 1) return 'incomplete';
  if (data[0] !== 0x16) return undefined; // not a handshake record
  if (data.length < 5) return 'incomplete';
  const recordLength = data.readUInt16BE(3);
  if (recordLength > MAX_RECORD) return undefined;
  if (data.length < 5 + recordLength) return 'incomplete';
  const record = data.subarray(5, 5 + recordLength);
  try {
    if (record[0] !== 0x01) return undefined; // not a ClientHello
    const helloLength = record.readUIntBE(1, 3);
    if (helloLength + 4 > record.length) return undefined; // split over records
    const hello = record.subarray(4, 4 + helloLength);
    let offset = 2 + 32; // client_version, random
    offset += 1 + hello[offset]!; // session_id
    offset += 2 + hello.readUInt16BE(offset); // cipher_suites
    offset += 1 + hello[offset]!; // compression_methods
    const info: ClientHelloInfo = { servername: undefined, alpnProtocols: [] };
    if (offset >= hello.length) return info;
    const extensionsEnd = offset + 2 + hello.readUInt16BE(offset);
    offset += 2;
    while (offset + 4 <= extensionsEnd && extensionsEnd <= hello.length) {
      const type = hello.readUInt16BE(offset);
      const length = hello.readUInt16BE(offset + 2);
      const body = hello.subarray(offset + 4, offset + 4 + length);
      offset += 4 + length;
      if (type === 0x0000) {
        // server_name: list length, then (type, length, name)*; host_name is type 0.
        let at = 2;
        while (at + 3 <= body.length) {
          const nameType = body[at]!;
          const nameLength = body.readUInt16BE(at + 1);
          if (nameType === 0) info.servername = body.subarray(at + 3, at + 3 + nameLength).toString('latin1');
          at += 3 + nameLength;
        }
      } else if (type === 0x0010) {
        // application_layer_protocol_negotiation: list length, then (length, protocol)*.
        let at = 2;
        while (at + 1 <= body.length) {
          const protocolLength = body[at]!;
          info.alpnProtocols.push(body.subarray(at + 1, at + 1 + protocolLength).toString('latin1'));
          at += 1 + protocolLength;
        }
      }
    }
    return info;
  } catch {
    return undefined; // truncated fields: not a well-formed ClientHello
  }
}

/**
 * Reads the ClientHello off a fresh connection without consuming it: whatever was read is put
 * back (`unshift`) before the promise settles. Undefined when the first bytes are not a
 * ClientHello, or none came within `timeoutMs`, or the connection ended.
 */
export function readClientHello(socket: net.Socket, timeoutMs = 10_000): Promise<ClientHelloInfo | undefined> {
  const nothing = (buffered: Buffer) => ({ result: undefined, putBack: buffered });
  return readPrefix<ClientHelloInfo | undefined>(socket, {
    timeoutMs,
    examine(buffered) {
      const parsed = parseClientHello(buffered);
      if (parsed !== 'incomplete') return { result: parsed, putBack: buffered };
      return buffered.length > MAX_RECORD + 5 ? nothing(buffered) : 'more';
    },
    ended: nothing,
    timedOut: nothing,
  });
}
