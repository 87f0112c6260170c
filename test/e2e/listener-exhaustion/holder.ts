/**
 * A client process of the listener-exhaustion test: opens `count` connections to one listener from
 * the given loopback source addresses (round robin, `localAddress`), each left half-sent (a partial
 * head, or a whole head with a partial body), and holds them until the parent says stop or goes
 * away. A process of its own, so that its descriptors are not the test runner's.
 *
 * Bounded: each connection is attempted once, at most `concurrency` connects are pending at once,
 * a connect that takes longer than CONNECT_TIMEOUT_MS is given up.
 */
import net from 'node:net';

export interface HolderJob {
  host: string;
  port: number;
  sources: string[];
  count: number;
  /** What each connection sends before it stops sending. */
  requests: 'api' | 'proxy';
  concurrency: number;
}

/** What the holder tells its parent once every attempt has settled, and on request. */
export interface HolderReport {
  kind: 'report';
  attempted: number;
  /** Connections the server accepted (the connect completed). */
  connected: number;
  /** Connections still open now. */
  open: number;
  /** Connections the server closed or reset. */
  closedByServer: number;
  /** Connects that failed or timed out. */
  failed: number;
  /** Answers the server wrote before it closed, by status line. */
  answers: Record<string, number>;
  done: boolean;
}

export type HolderCommand = { kind: 'report' } | { kind: 'stop' };

const CONNECT_TIMEOUT_MS = 15_000;

/** Half a request: every other one a partial head, the others a head with a partial body. */
function partialRequest(requests: HolderJob['requests'], index: number): string {
  if (requests === 'api') {
    return index % 2 === 0
      ? 'POST /oauth/token HTTP/1.1\r\nHost: api.test\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Le'
      : 'POST /oauth/token HTTP/1.1\r\nHost: api.test\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 4096\r\n\r\ngrant_type=client_cre';
  }
  return index % 2 === 0
    ? 'GET /slow HTTP/1.1\r\nHost: shop.test\r\nUser-Agent: Mozilla/5.0\r\nAccept: */'
    : 'POST /slow HTTP/1.1\r\nHost: shop.test\r\nUser-Agent: Mozilla/5.0\r\nContent-Type: text/plain\r\nContent-Length: 4096\r\n\r\nhello';
}

function run(job: HolderJob): void {
  const sockets = new Set<net.Socket>();
  const report: HolderReport = {
    kind: 'report',
    attempted: 0,
    connected: 0,
    open: 0,
    closedByServer: 0,
    failed: 0,
    answers: {},
    done: false,
  };
  let pending = 0;
  let stopping = false;
  const send = () => process.send?.({ ...report, open: sockets.size } satisfies HolderReport);

  const next = (): void => {
    while (!stopping && pending < job.concurrency && report.attempted < job.count) {
      const index = report.attempted++;
      pending++;
      const socket = net.connect({ host: job.host, port: job.port, localAddress: job.sources[index % job.sources.length]! });
      let connected = false;
      let settled = false;
      let received = '';
      const settle = () => {
        if (settled) return;
        settled = true;
        pending--;
        if (report.attempted >= job.count && pending === 0 && !report.done) {
          report.done = true;
          send();
        }
        setImmediate(next);
      };
      socket.setTimeout(CONNECT_TIMEOUT_MS, () => {
        if (!connected) socket.destroy();
      });
      socket.on('connect', () => {
        connected = true;
        report.connected++;
        socket.setTimeout(0);
        sockets.add(socket);
        socket.write(partialRequest(job.requests, index));
        settle();
      });
      socket.on('data', (chunk: Buffer) => {
        if (received.length < 64) received += chunk.toString('latin1');
      });
      socket.on('error', () => {});
      socket.on('close', () => {
        sockets.delete(socket);
        if (stopping) return;
        if (connected) {
          report.closedByServer++;
          const status = /^HTTP\/1\.1 (\d{3})/.exec(received)?.[1] ?? 'none';
          report.answers[status] = (report.answers[status] ?? 0) + 1;
        } else {
          report.failed++;
          settle();
        }
      });
    }
  };

  process.on('message', (command: HolderCommand) => {
    if (command.kind === 'report') send();
    else if (command.kind === 'stop') {
      stopping = true;
      for (const socket of sockets) socket.destroy();
      process.exit(0);
    }
  });
  // The parent went away (a failed test): nothing is left holding the listener.
  process.on('disconnect', () => process.exit(0));
  next();
}

run(JSON.parse(process.argv[2]!) as HolderJob);
