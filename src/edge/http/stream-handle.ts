/**
 * Reads and writes straight on a socket's libuv handle (Node's StreamBase), for the early refusal
 * path, where Node's per-read and per-write layers are most of the user-space cost of a refusal
 * (bench/flood), and for the layer 4 tunnel (its client socket, and its origin side, a handle no
 * socket owns: `readRawHandle`).
 *
 * Reads: the handle's `onread` (what libuv's reads call) hands the bytes, read into the caller's
 * buffer, to the caller without the socket's reader in between (its timer refresh, its state and
 * slot lookups); the end and errors still go to the socket's reader, which emits them as usual.
 *
 * Writes: the handle's `writeBuffer`, without the Writable stream layer and its WriteWrap per write.
 * A write the kernel takes at once (libuv's try_write, the usual case) uses no request object: one
 * is kept for all of them. One the kernel does not take at once is queued by libuv and needs a real
 * WriteWrap (with `oncomplete`), kept alive with its bytes until it completes; the caller stops
 * reading until then, so a client that does not read cannot grow our memory. Order: a direct write
 * goes to libuv's queue, behind any write the Writable layer handed to libuv and ahead of any the
 * Writable layer still holds: the caller writes directly only when the socket's Writable holds
 * nothing (`writableLength === 0`). `socket.end()` after direct writes delivers them all: libuv's
 * shutdown waits for the queued writes.
 *
 * The WriteWrap constructor, the "last write was async" flag and a read's length are Node
 * internals, taken from `process.binding('stream_wrap')` (allowed; deprecated in the documentation
 * only: it warns under --pending-deprecation, where this is not used). Where any of it is missing
 * (another Node), nothing is read or written here: the caller uses the socket's own reader and
 * `socket.write`. Checked by stream-handle.test.ts.
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
  /**
   * Written by every StreamBase write: [kLastWriteWasAsync] is 1 when libuv queued (part of) it;
   * and before every `onread`: [kReadBytesOrError] is the read's length, 0, or an error (UV_EOF...).
   */
  readonly streamBaseState: Int32Array;
  readonly kLastWriteWasAsync: number;
  readonly kReadBytesOrError: number;
}

/** What this module uses of a socket's handle (a libuv stream). */
export interface StreamHandle {
  writeBuffer?: (request: WriteRequest, data: Uint8Array) => number;
  writeLatin1String?: (request: WriteRequest, data: string) => number;
  /** Called by libuv's reads, `this` the handle (an accessor: kept in the handle's internal field). */
  onread?: (this: StreamHandle, arrayBuffer: ArrayBuffer | undefined) => unknown;
  useUserBuffer?: (buffer: Uint8Array) => void;
  readStart?: () => number;
  readStop?: () => number;
  reading?: boolean;
}

const isIndex = (value: unknown, state: Int32Array): value is number =>
  typeof value === 'number' && Number.isInteger(value) && value >= 0 && value < state.length;

export const STREAM_BASE: StreamWrapInternals | undefined = ((): StreamWrapInternals | undefined => {
  if (pendingDeprecation()) return undefined;
  try {
    const binding = (process as unknown as { binding(name: string): Partial<StreamWrapInternals> }).binding('stream_wrap');
    const { WriteWrap, streamBaseState, kLastWriteWasAsync, kReadBytesOrError } = binding;
    if (typeof WriteWrap !== 'function' || !(streamBaseState instanceof Int32Array)) return undefined;
    if (!isIndex(kLastWriteWasAsync, streamBaseState) || !isIndex(kReadBytesOrError, streamBaseState)) return undefined;
    return { WriteWrap, streamBaseState, kLastWriteWasAsync, kReadBytesOrError };
  } catch {
    // The permission model (or a Node without the binding) refuses it: the socket's own paths then.
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

/** Who owns the handle written to: destroyed on a failed write (a net.Socket, or a raw connection of the caller's). */
export interface WriteOwner {
  destroy(): unknown;
  readonly destroyed: boolean;
}

/**
 * Writes `bytes` to `socket`'s handle. true: the kernel has them all. false: libuv queued the rest,
 * and `onWritten` is called once it is written (the caller stops reading until then), or the write
 * failed and the socket is destroyed (`onWritten` is never called). undefined: no direct write on
 * this Node or this socket (no handle): nothing was written.
 */
export function writeToHandle(
  socket: WriteOwner | net.Socket,
  bytes: Uint8Array,
  onWritten: () => void,
  handle = (socket as { _handle?: StreamHandle | null })._handle,
): boolean | undefined {
  const internals = STREAM_BASE;
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

/**
 * Writes `text` (latin1) to `socket`'s handle, as `socket.write(text, 'latin1')` would with nothing
 * queued before it, without the stream's layer. true: written, or queued by libuv (which keeps its
 * own copy of what it could not write at once); a failed write destroys the socket. undefined: not
 * on this Node or this socket, or the socket has writes queued: nothing was written.
 */
export function writeLatin1ToHandle(socket: net.Socket, text: string): boolean | undefined {
  const internals = STREAM_BASE;
  const handle = (socket as { _handle?: StreamHandle | null })._handle;
  if (internals === undefined || handle === null || handle === undefined || typeof handle.writeLatin1String !== 'function')
    return undefined;
  if (socket.writableLength !== 0 || socket.connecting) return undefined;
  const request = spare ?? new internals.WriteWrap();
  spare = undefined;
  if (handle.writeLatin1String(request, text) !== 0) {
    socket.destroy();
    return true;
  }
  if (internals.streamBaseState[internals.kLastWriteWasAsync] === 0) spare = request;
  else request.oncomplete = (status: number): void => void (status < 0 && socket.destroy());
  return true;
}

/** What the reads of a handle are handed to (`readFromHandle`). */
export interface HandleReader {
  /** The first `bytes` of the caller's buffer were just read; false: reading stops (the caller starts it again). */
  onRead(bytes: number): boolean;
  /**
   * Read after every `onRead`: when set, the buffer the next reads go into (the handle takes it
   * from `onread`'s return value, as net.Socket's `onread` option does with its buffer function).
   */
  readonly buffer?: Uint8Array | undefined;
}

/** The reader of a handle no socket owns (`readRawHandle`): the end and errors come to it too. */
export interface RawHandleReader extends HandleReader {
  /** The peer sent FIN (libuv has stopped reading). */
  onEnd(): void;
  /** A read failed: `errno` is libuv's (negative). */
  onError(errno: number): void;
}

/** A handle read by `readFromHandle`: its reader, and the socket's own (for the end and errors). */
interface ReadHandle extends StreamHandle {
  [READER]: HandleReader;
  [STREAM_READ]: NonNullable<StreamHandle['onread']>;
}

const READER = Symbol('reader');
const STREAM_READ = Symbol('streamRead');
const READ_STATE = STREAM_BASE?.streamBaseState ?? new Int32Array(1);
const READ_LENGTH = STREAM_BASE?.kReadBytesOrError ?? 0;

/**
 * The one `onread` of every handle read by `readFromHandle` (one function, not one per connection:
 * its code and the state it reaches stay in the caches under a flood from many sources).
 */
function onHandleRead(this: ReadHandle, arrayBuffer: ArrayBuffer | undefined): unknown {
  const bytes = READ_STATE[READ_LENGTH]!;
  if (bytes <= 0) return this[STREAM_READ](arrayBuffer);
  const reader = this[READER];
  if (!reader.onRead(bytes)) {
    // As the socket's reader does; on a handle already closed (the socket destroyed), nothing.
    this.reading = false;
    this.readStop?.();
  }
  return reader.buffer;
}

/** libuv's end of stream (the same on every platform). */
export const UV_EOF = -4095;

/** The end and the errors of a handle no socket owns: to its reader. */
function onRawEndOrError(this: ReadHandle): unknown {
  const result = READ_STATE[READ_LENGTH]!;
  if (result === 0) return undefined;
  const reader = this[READER] as RawHandleReader;
  this.reading = false;
  if (result === UV_EOF) reader.onEnd();
  else reader.onError(result);
  return undefined;
}

/**
 * Hands every read of a handle no socket owns (a raw TCP handle) to `reader`, read into `buffer`,
 * with its end and errors. Reading starts at once: readStart's result (0, or libuv's error), or
 * undefined: not on this Node, nothing changed.
 */
export function readRawHandle(handle: StreamHandle, buffer: Uint8Array, reader: RawHandleReader): number | undefined {
  if (STREAM_BASE === undefined || typeof handle.useUserBuffer !== 'function' || typeof handle.readStart !== 'function') return undefined;
  const reading = handle as ReadHandle;
  reading[READER] = reader;
  reading[STREAM_READ] = onRawEndOrError as unknown as ReadHandle[typeof STREAM_READ];
  handle.onread = onHandleRead as StreamHandle['onread'];
  handle.useUserBuffer(buffer);
  handle.reading = true;
  return handle.readStart();
}

/**
 * Hands every read of `socket` to `reader`, read into `buffer` (the handle's `useUserBuffer`, as
 * the `onread` option of `net.Socket` does), without the socket's reader; its end and its errors
 * go to the socket's reader. The socket must be flowing (`resume()`) for the reads to start. The
 * handle (to write to directly), or undefined: not on this Node or this socket, and nothing changed.
 */
export function readFromHandle(socket: net.Socket, buffer: Buffer, reader: HandleReader): StreamHandle | undefined {
  const handle = (socket as unknown as { _handle?: StreamHandle | null })._handle;
  if (STREAM_BASE === undefined || handle === null || handle === undefined) return undefined;
  const streamRead = handle.onread;
  if (typeof streamRead !== 'function' || typeof handle.useUserBuffer !== 'function' || typeof handle.readStop !== 'function')
    return undefined;
  const reading = handle as ReadHandle;
  reading[READER] = reader;
  // A handle read this way before (the handle front end's, handed to the early path) keeps the socket's own reader.
  if (streamRead !== onHandleRead) reading[STREAM_READ] = streamRead;
  // The handle is now a ReadHandle, which onHandleRead needs as `this`.
  handle.onread = onHandleRead as StreamHandle['onread'];
  handle.useUserBuffer(buffer);
  return handle;
}
