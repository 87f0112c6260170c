/**
 * Reads the first bytes of a fresh connection before its real reader sees them (a PROXY header, a
 * TLS ClientHello), then leaves the socket paused with the bytes chosen by the caller put back
 * (`unshift`), so the next reader (a TLS handshake, an HTTP parser, a tunnel) gets them as if
 * nothing had been read.
 */
import type net from 'node:net';

/** What to do with the bytes read so far: wait for more, or settle and put `putBack` on the socket. */
export type PrefixVerdict<T> = 'more' | { readonly result: T; readonly putBack: Buffer | undefined };

export interface PrefixReader<T> {
  /** Called with everything read so far after each chunk. */
  examine(buffered: Buffer): PrefixVerdict<T>;
  /** The connection ended, closed or failed before a verdict. */
  ended(buffered: Buffer): PrefixVerdict<T> & object;
  /** No verdict within `timeoutMs`. */
  timedOut(buffered: Buffer): PrefixVerdict<T> & object;
  readonly timeoutMs: number;
}

export function readPrefix<T>(socket: net.Socket, reader: PrefixReader<T>): Promise<T> {
  return new Promise((resolve) => {
    let buffered: Buffer = Buffer.alloc(0);
    let done = false;
    const finish = (verdict: PrefixVerdict<T> & object): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('end', onEnd);
      socket.off('close', onEnd);
      socket.off('error', onEnd);
      socket.pause();
      if (verdict.putBack !== undefined && verdict.putBack.length > 0) socket.unshift(verdict.putBack);
      resolve(verdict.result);
    };
    const onData = (chunk: Buffer): void => {
      buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
      const verdict = reader.examine(buffered);
      if (verdict !== 'more') finish(verdict);
    };
    const onEnd = (): void => finish(reader.ended(buffered));
    const timer = setTimeout(() => finish(reader.timedOut(buffered)), reader.timeoutMs);
    timer.unref();
    socket.on('data', onData);
    socket.once('end', onEnd);
    socket.once('close', onEnd);
    socket.once('error', onEnd);
    // A socket accepted or handed on paused (pauseOnConnect, a PROXY header read before) does not
    // flow by a 'data' listener alone.
    socket.resume();
  });
}
