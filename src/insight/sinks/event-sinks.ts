/**
 * Shipping insight events to the operator's SIEM (TPS_EVENT_SINKS): every event this node stored
 * goes to each sink once (the node's ingestion hands them over after the store took them, see
 * src/edge/runtime/insight-ingest.ts), on the process's main thread, never in a serving path.
 *
 * Each sink has a bounded queue (MAX_QUEUED_EVENTS, MAX_QUEUED_BYTES): when its destination is
 * slow or away, new events are dropped and counted (`tps_event_sink_dropped_total{sink,reason}`),
 * the store keeps them all. TCP reconnects with a backoff (1 s doubling to 30 s) and sends what
 * queued meanwhile; a message already written to a connection that then breaks is not sent again
 * (at most once). UDP sends each message as one datagram; a message too large for one is sent
 * without its request headers (`truncated`). A file gets JSON lines (line-writer.ts).
 */
import dgram from 'node:dgram';
import net from 'node:net';
import os from 'node:os';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { InsightEvent } from '@tps/model';
import { LineWriter } from '../../io/line-writer.ts';
import type { SinkAddress } from './sink-address.ts';
import { MAX_DATAGRAM_BYTES, eventJson, octetCounted, syslogMessage, truncatedEventJson, type SyslogOrigin } from './syslog.ts';

/** Events a sink holds while its destination cannot take them. */
export const MAX_QUEUED_EVENTS = 10_000;
/** Bytes a sink holds while its destination cannot take them. */
export const MAX_QUEUED_BYTES = 16 * 1024 * 1024;
const RECONNECT_MIN_MS = 1_000;
const RECONNECT_MAX_MS = 30_000;
const CONNECT_TIMEOUT_MS = 10_000;
const LOG_EVERY_MS = 60_000;

export type SinkDropReason = 'queue_full' | 'too_large' | 'error';

interface SinkMetrics {
  sent(count?: number): void;
  dropped(reason: SinkDropReason, count?: number): void;
}

interface SinkLogger {
  warn(details: object, message: string): void;
  error(details: object, message: string): void;
}

interface Sink {
  readonly label: string;
  /** Events waiting for the destination. */
  readonly queued: number;
  /** Connected (TCP), or able to send (UDP, file). */
  readonly up: boolean;
  ship(event: InsightEvent): void;
  close(deadline: number): Promise<void>;
}

export interface EventSinksOptions {
  registry: Registry;
  logger: SinkLogger;
  /** This node's name (TPS_NODE_ID), in every record. */
  nodeId: string;
  /** The HOSTNAME of syslog messages; default the machine's host name. */
  hostname?: string;
}

export class EventSinks {
  readonly #sinks: Sink[];

  /** Opens every sink (a file sink opens its file at once: one that cannot be opened throws). */
  constructor(addresses: readonly SinkAddress[], options: EventSinksOptions) {
    const registers = [options.registry];
    const sent = new Counter({
      name: 'tps_event_sink_sent_total',
      help: 'Insight events handed to an event sink (TPS_EVENT_SINKS): written to its connection, datagram or file.',
      labelNames: ['sink'],
      registers,
    });
    const dropped = new Counter({
      name: 'tps_event_sink_dropped_total',
      help: 'Insight events an event sink did not send: queue_full (its destination slow or away), too_large (over a datagram even without headers), error (a send or write failed).',
      labelNames: ['sink', 'reason'],
      registers,
    });
    const origin: SyslogOrigin = { hostname: options.hostname ?? os.hostname(), procId: String(process.pid) };
    const lastLog = new Map<string, number>();
    this.#sinks = addresses.map((address) => {
      const metrics: SinkMetrics = {
        sent: (count = 1) => sent.inc({ sink: address.label }, count),
        dropped: (reason, count = 1) => dropped.inc({ sink: address.label, reason }, count),
      };
      // One line a minute per sink and message: an unreachable SIEM must not flood the log.
      const logger: SinkLogger = {
        warn: (details, message) =>
          limited(address.label + message, () => options.logger.warn({ sink: address.label, ...details }, message)),
        error: (details, message) =>
          limited(address.label + message, () => options.logger.error({ sink: address.label, ...details }, message)),
      };
      const limited = (key: string, write: () => void) => {
        const now = Date.now();
        if (now - (lastLog.get(key) ?? 0) < LOG_EVERY_MS) return;
        lastLog.set(key, now);
        write();
      };
      if (address.kind === 'file') return new FileSink(address.label, address.path, options.nodeId, metrics, logger);
      if (address.kind === 'syslog-udp')
        return new UdpSink(address.label, address.host, address.port, options.nodeId, origin, metrics, logger);
      return new TcpSink(address.label, address.host, address.port, options.nodeId, origin, metrics, logger);
    });
    const sinks = this.#sinks;
    new Gauge({
      name: 'tps_event_sink_queued_events',
      help: 'Insight events waiting for an event sink to take them.',
      labelNames: ['sink'],
      registers,
      collect() {
        for (const sink of sinks) this.set({ sink: sink.label }, sink.queued);
      },
    });
    new Gauge({
      name: 'tps_event_sink_up',
      help: 'Whether an event sink can send now: 1 when its TCP connection is up (UDP and file sinks: 1 while they work).',
      labelNames: ['sink'],
      registers,
      collect() {
        for (const sink of sinks) this.set({ sink: sink.label }, sink.up ? 1 : 0);
      },
    });
  }

  get labels(): string[] {
    return this.#sinks.map((sink) => sink.label);
  }

  /** Events the store has taken, in order: to every sink. */
  ship(events: readonly InsightEvent[]): void {
    for (const sink of this.#sinks) for (const event of events) sink.ship(event);
  }

  /** Sends what waits for up to `timeoutMs`, then closes every sink. */
  async close(timeoutMs = 2_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    await Promise.all(this.#sinks.map((sink) => sink.close(deadline).catch(() => undefined)));
  }
}

/** A bounded queue of framed messages. */
class MessageQueue {
  readonly #messages: Buffer[] = [];
  #bytes = 0;

  get length(): number {
    return this.#messages.length;
  }

  push(message: Buffer): boolean {
    if (this.#messages.length >= MAX_QUEUED_EVENTS || this.#bytes + message.length > MAX_QUEUED_BYTES) return false;
    this.#messages.push(message);
    this.#bytes += message.length;
    return true;
  }

  shift(): Buffer | undefined {
    const message = this.#messages.shift();
    if (message !== undefined) this.#bytes -= message.length;
    return message;
  }
}

class FileSink implements Sink {
  readonly label: string;
  readonly #writer: LineWriter;
  readonly #nodeId: string;
  readonly #metrics: SinkMetrics;
  #failed = false;
  #reportedDrops = 0;

  constructor(label: string, path: string, nodeId: string, metrics: SinkMetrics, logger: SinkLogger) {
    this.label = label;
    this.#nodeId = nodeId;
    this.#metrics = metrics;
    this.#writer = new LineWriter(path, {
      maxBufferedBytes: MAX_QUEUED_BYTES,
      onError: (err) => {
        this.#failed = true;
        logger.error({ err }, 'event sink: writing the file failed');
      },
    });
  }

  get queued(): number {
    return this.#writer.pendingLines;
  }

  get up(): boolean {
    return !this.#failed;
  }

  ship(event: InsightEvent): void {
    if (this.#writer.write(eventJson(event, this.#nodeId))) {
      this.#metrics.sent();
      this.#failed = false;
    }
    this.#countDrops();
  }

  #countDrops(): void {
    const dropped = this.#writer.dropped - this.#reportedDrops;
    if (dropped <= 0) return;
    this.#reportedDrops = this.#writer.dropped;
    this.#metrics.dropped(this.#failed ? 'error' : 'queue_full', dropped);
  }

  async close(): Promise<void> {
    await this.#writer.close();
    this.#countDrops();
  }
}

class UdpSink implements Sink {
  readonly label: string;
  readonly #host: string;
  readonly #port: number;
  readonly #nodeId: string;
  readonly #origin: SyslogOrigin;
  readonly #metrics: SinkMetrics;
  readonly #logger: SinkLogger;
  #socket: dgram.Socket | undefined;
  #connected = false;
  #closed = false;
  #retry: NodeJS.Timeout | undefined;
  /** Messages waiting for the socket to connect (its name resolved). */
  readonly #queue = new MessageQueue();
  #inFlight = 0;

  constructor(label: string, host: string, port: number, nodeId: string, origin: SyslogOrigin, metrics: SinkMetrics, logger: SinkLogger) {
    this.label = label;
    this.#host = host;
    this.#port = port;
    this.#nodeId = nodeId;
    this.#origin = origin;
    this.#metrics = metrics;
    this.#logger = logger;
    this.#connect();
  }

  get queued(): number {
    return this.#queue.length + this.#inFlight;
  }

  get up(): boolean {
    return this.#connected;
  }

  /** A connected socket: the name is resolved once (not per datagram), and the family follows the address. */
  #connect(): void {
    if (this.#closed) return;
    const family = net.isIPv6(this.#host) ? 'udp6' : 'udp4';
    const socket = dgram.createSocket(family);
    this.#socket = socket;
    socket.on('error', (err) => this.#logger.warn({ err }, 'event sink: syslog over UDP failed'));
    socket.connect(this.#port, this.#host, () => {
      this.#connected = true;
      for (let message = this.#queue.shift(); message !== undefined; message = this.#queue.shift()) this.#send(message);
    });
    socket.once('close', () => {
      this.#connected = false;
    });
    // A name that does not resolve fails the connect: try again later, queueing meanwhile.
    socket.once('error', () => {
      if (this.#connected || this.#closed) return;
      socket.close();
      this.#retry = setTimeout(() => this.#connect(), RECONNECT_MAX_MS);
      this.#retry.unref();
    });
  }

  ship(event: InsightEvent): void {
    let message = Buffer.from(syslogMessage(event, eventJson(event, this.#nodeId), this.#origin));
    if (message.length > MAX_DATAGRAM_BYTES)
      message = Buffer.from(syslogMessage(event, truncatedEventJson(event, this.#nodeId), this.#origin));
    if (message.length > MAX_DATAGRAM_BYTES) {
      this.#metrics.dropped('too_large');
      return;
    }
    if (!this.#connected) {
      if (!this.#queue.push(message)) this.#metrics.dropped('queue_full');
      return;
    }
    if (this.#inFlight >= MAX_QUEUED_EVENTS) {
      this.#metrics.dropped('queue_full');
      return;
    }
    this.#send(message);
  }

  #send(message: Buffer): void {
    this.#inFlight++;
    this.#socket!.send(message, (err) => {
      this.#inFlight--;
      if (err) {
        // A connected UDP socket hears of a closed port (ICMP) on a later send.
        this.#metrics.dropped('error');
        this.#logger.warn({ err }, 'event sink: a syslog datagram could not be sent');
      } else {
        this.#metrics.sent();
      }
    });
  }

  async close(deadline: number): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#retry);
    while (this.#inFlight > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    const socket = this.#socket;
    if (socket !== undefined)
      await new Promise<void>((resolve) => {
        try {
          socket.close(() => resolve());
        } catch {
          resolve();
        }
      });
  }
}

class TcpSink implements Sink {
  readonly label: string;
  readonly #host: string;
  readonly #port: number;
  readonly #nodeId: string;
  readonly #origin: SyslogOrigin;
  readonly #metrics: SinkMetrics;
  readonly #logger: SinkLogger;
  readonly #queue = new MessageQueue();
  #socket: net.Socket | undefined;
  #connected = false;
  /** The socket's buffer is full: wait for 'drain'. */
  #waitingForDrain = false;
  #backoffMs = RECONNECT_MIN_MS;
  #retry: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(label: string, host: string, port: number, nodeId: string, origin: SyslogOrigin, metrics: SinkMetrics, logger: SinkLogger) {
    this.label = label;
    this.#host = host;
    this.#port = port;
    this.#nodeId = nodeId;
    this.#origin = origin;
    this.#metrics = metrics;
    this.#logger = logger;
    this.#connect();
  }

  get queued(): number {
    return this.#queue.length;
  }

  get up(): boolean {
    return this.#connected;
  }

  ship(event: InsightEvent): void {
    const message = octetCounted(syslogMessage(event, eventJson(event, this.#nodeId), this.#origin));
    if (!this.#queue.push(message)) {
      this.#metrics.dropped('queue_full');
      return;
    }
    this.#pump();
  }

  #connect(): void {
    if (this.#closed) return;
    const socket = net.connect({ host: this.#host, port: this.#port, noDelay: true });
    this.#socket = socket;
    socket.setTimeout(CONNECT_TIMEOUT_MS, () => socket.destroy(Object.assign(new Error('connect timed out'), { code: 'ETIMEDOUT' })));
    socket.once('connect', () => {
      socket.setTimeout(0);
      this.#connected = true;
      this.#backoffMs = RECONNECT_MIN_MS;
      this.#pump();
    });
    socket.on('drain', () => {
      this.#waitingForDrain = false;
      this.#pump();
    });
    // The collector sends nothing back; reading keeps its FIN visible.
    socket.on('data', () => {});
    socket.on('end', () => socket.destroy());
    socket.on('error', (err) => this.#logger.warn({ err }, 'event sink: syslog over TCP failed; reconnecting'));
    socket.once('close', () => {
      this.#connected = false;
      this.#waitingForDrain = false;
      if (this.#socket === socket) this.#socket = undefined;
      if (this.#closed) return;
      this.#retry = setTimeout(() => this.#connect(), this.#backoffMs);
      this.#retry.unref();
      this.#backoffMs = Math.min(RECONNECT_MAX_MS, this.#backoffMs * 2);
    });
  }

  /** Writes queued messages while the connection takes them. */
  #pump(): void {
    const socket = this.#socket;
    if (!this.#connected || socket === undefined || this.#waitingForDrain) return;
    for (let message = this.#queue.shift(); message !== undefined; message = this.#queue.shift()) {
      const more = socket.write(message);
      this.#metrics.sent();
      if (!more) {
        this.#waitingForDrain = true;
        return;
      }
    }
  }

  async close(deadline: number): Promise<void> {
    while (this.#connected && (this.#queue.length > 0 || (this.#socket?.writableLength ?? 0) > 0) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    this.#closed = true;
    clearTimeout(this.#retry);
    const socket = this.#socket;
    if (socket === undefined) return;
    await new Promise<void>((resolve) => {
      socket.once('close', () => resolve());
      socket.end();
      setTimeout(() => socket.destroy(), Math.max(0, deadline - Date.now())).unref();
    });
  }
}
