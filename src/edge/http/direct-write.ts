/**
 * Writes straight to a socket's libuv handle (Node's StreamBase `writeBuffer`), for the early
 * refusal path's prebuilt answers: `socket.write` goes through the Writable stream layer and makes
 * a WriteWrap per write, most of the user-space cost of a refusal in bench/flood. Here a write the
 * kernel takes at once (libuv's try_write, the usual case) uses no request object: one is kept for
 * all of them. One the kernel does not take at once is queued by libuv and needs a real WriteWrap
 * (with `oncomplete`), kept alive with its bytes until it completes; the caller stops reading
 * until then, so a client that does not read cannot grow our memory.
 *
 * The WriteWrap constructor and the "last write was async" flag are Node internals, taken from
 * `process.binding('stream_wrap')` (allowed, deprecated in the documentation only: it warns under
 * --pending-deprecation, where this is not used). Where any of it is missing (another Node), the
 * writes are not made here and the caller uses `socket.write`. Checked by direct-write.test.ts.
 *
 * Order: a direct write goes to libuv's queue, behind any write the Writable layer handed to libuv
 * and ahead of any the Writable layer still holds: the caller writes directly only when the socket's
 * Writable holds nothing (`writableLength === 0`). `socket.end()` after direct writes delivers them
 * all: libuv's shutdown waits for the queued writes.
 */
import type net from 'node:net';

/** A WriteWrap as this module uses it. */
interface WriteRequest {
  oncomplete?: ((status: number) => void) | undefined;
  /** The bytes of a queued write, alive until it completes (libuv points into them). */
  buffer?: Uint8Array | null;
}

interface StreamWrapInternals {
  readonly WriteWrap: new () => WriteRequest;
  /** Written by every StreamBase write: [kLastWriteWasAsync] is 1 when libuv queued (part of) it. */
  readonly streamBaseState: Int32Array;
  readonly kLastWriteWasAsync: number;
}

/** What this module uses of a socket's handle (a libuv stream). */
interface WriteHandle {
  writeBuffer?: (request: WriteRequest, data: Uint8Array) => number;
}

export const DIRECT_WRITES: StreamWrapInternals | undefined = ((): StreamWrapInternals | undefined => {
  if (pendingDeprecation()) return undefined;
  try {
    const binding = (process as unknown as { binding(name: string): Partial<StreamWrapInternals> }).binding('stream_wrap');
    const { WriteWrap, streamBaseState, kLastWriteWasAsync } = binding;
    if (typeof WriteWrap !== 'function' || !(streamBaseState instanceof Int32Array) || typeof kLastWriteWasAsync !== 'number')
      return undefined;
    if (kLastWriteWasAsync < 0 || kLastWriteWasAsync >= streamBaseState.length) return undefined;
    return { WriteWrap, streamBaseState, kLastWriteWasAsync };
  } catch {
    // The permission model (or a Node without the binding) refuses it: socket.write it is.
    return undefined;
  }
})();

/** `process.binding` warns (DEP0111) under --pending-deprecation: no warning of ours in the logs. */
function pendingDeprecation(): boolean {
  if (process.execArgv.includes('--pending-deprecation')) return true;
  if ((process.env.NODE_OPTIONS ?? '').includes('--pending-deprecation')) return true;
  return process.env.NODE_PENDING_DEPRECATION === '1';
}

/** The request object of the writes the kernel took at once: none of them keeps it. */
let spare: WriteRequest | undefined;

/**
 * Writes `bytes` to `socket`'s handle. true: the kernel has them all. false: libuv queued the rest,
 * and `onWritten` is called once it is written (the caller stops reading until then), or the write
 * failed and the socket is destroyed (`onWritten` is never called). undefined: no direct write on
 * this Node or this socket (no handle): nothing was written.
 */
export function writeToHandle(socket: net.Socket, bytes: Uint8Array, onWritten: () => void): boolean | undefined {
  const internals = DIRECT_WRITES;
  const handle = (socket as unknown as { _handle?: WriteHandle | null })._handle;
  if (internals === undefined || handle === null || handle === undefined || typeof handle.writeBuffer !== 'function') return undefined;
  const request = spare ?? new internals.WriteWrap();
  spare = undefined;
  const error = handle.writeBuffer(request, bytes);
  if (error !== 0) {
    // Not kept: libuv may have had it (a failed queued write) before the error.
    socket.destroy();
    return false;
  }
  if (internals.streamBaseState[internals.kLastWriteWasAsync] === 0) {
    spare = request;
    return true;
  }
  request.buffer = bytes;
  request.oncomplete = (status: number): void => {
    request.buffer = null;
    if (status < 0) socket.destroy();
    else if (!socket.destroyed) onWritten();
  };
  return false;
}
