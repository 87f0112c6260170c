/**
 * The event sinks an operator names in TPS_EVENT_SINKS: a comma list of
 *
 *   syslog+udp://host[:port]   RFC 5424 messages, one datagram each (RFC 5426); port 514 by default
 *   syslog+tcp://host[:port]   RFC 5424 messages framed by octet counting (RFC 6587); port 514 by default
 *   file:///absolute/path      JSON lines
 *
 * `host` is an IPv4 address, an [IPv6] address or a DNS name. The addresses are the operator's own:
 * the tenants' origin policy does not apply to them. Parsed once at start; a bad entry stops it.
 */
import net from 'node:net';
import path from 'node:path';

export type SinkAddress =
  | { kind: 'syslog-udp' | 'syslog-tcp'; host: string; port: number; label: string }
  | { kind: 'file'; path: string; label: string };

const DEFAULT_SYSLOG_PORT = 514;
const HOSTNAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/;

export class SinkAddressError extends Error {}

/** One entry of the list; throws a SinkAddressError saying what is wrong. */
export function parseSinkAddress(entry: string): SinkAddress {
  const text = entry.trim();
  const scheme = /^([a-z0-9+]+):\/\//i.exec(text)?.[1]?.toLowerCase();
  if (scheme === 'file') {
    const rest = text.slice('file://'.length);
    if (!rest.startsWith('/')) throw new SinkAddressError(`"${text}": a file sink is file:///absolute/path (three slashes, no host)`);
    let decoded: string;
    try {
      decoded = decodeURIComponent(rest);
    } catch {
      throw new SinkAddressError(`"${text}": the path is not valid percent-encoding`);
    }
    if (decoded.includes('\0') || decoded.endsWith('/')) throw new SinkAddressError(`"${text}": the path must name a file`);
    const normalized = path.posix.normalize(decoded);
    return { kind: 'file', path: normalized, label: `file://${normalized}` };
  }
  if (scheme !== 'syslog+udp' && scheme !== 'syslog+tcp') {
    throw new SinkAddressError(`"${text}": must start with syslog+udp://, syslog+tcp:// or file:///`);
  }
  const authority = text.slice(scheme.length + 3);
  const match = /^(\[[^\]]*\]|[^:/?#@\s]+)(?::(\d{1,5}))?\/?$/.exec(authority);
  if (!match) throw new SinkAddressError(`"${text}": must be ${scheme}://host[:port] (no user, path or query)`);
  const rawHost = match[1]!;
  const host = rawHost.startsWith('[') ? rawHost.slice(1, -1) : rawHost;
  if (rawHost.startsWith('[') ? net.isIPv6(host) === false : !(net.isIPv4(host) || (HOSTNAME.test(host) && !/^[0-9.]+$/.test(host)))) {
    throw new SinkAddressError(`"${text}": "${host}" is neither an IP address nor a host name`);
  }
  const port = match[2] === undefined ? DEFAULT_SYSLOG_PORT : Number(match[2]);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new SinkAddressError(`"${text}": the port must be from 1 to 65535`);
  const kind = scheme === 'syslog+udp' ? 'syslog-udp' : 'syslog-tcp';
  const shownHost = net.isIPv6(host) ? `[${host}]` : host;
  return { kind, host, port, label: `${scheme}://${shownHost}:${port}` };
}

/** The comma list of TPS_EVENT_SINKS (empty entries ignored); throws on the first bad entry. */
export function parseSinkAddresses(list: string): SinkAddress[] {
  const sinks = list
    .split(',')
    .map((entry) => entry.trim())
    .filter(Boolean)
    .map(parseSinkAddress);
  const labels = new Set<string>();
  for (const sink of sinks) {
    if (labels.has(sink.label)) throw new SinkAddressError(`"${sink.label}" is listed twice`);
    labels.add(sink.label);
  }
  return sinks;
}
