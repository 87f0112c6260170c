/**
 * A lingering close (nginx's lingering_close): closing a socket with unread data resets the
 * connection, and a client still sending then often loses our answer (a 413 or a 429 seen as a
 * "connection reset"). So once our side is ended, what still arrives is read and dropped until
 * the client closes its side, for at most LINGER_MS. Used by the proxy's own answers
 * (phases/respond.ts) and by the early refusal path (early-refusal.ts).
 */
import type { Socket } from 'node:net';

/** How long a closing connection keeps dropping what the client still sends, after our answer. */
const LINGER_MS = 5_000;

/** Reads and drops what `socket` still receives until the client ends its side or LINGER_MS passes; the caller has ended ours. */
export function lingerAfterEnd(socket: Socket): void {
  const timer = setTimeout(() => socket.destroy(), LINGER_MS);
  timer.unref();
  socket.once('end', () => socket.destroy());
  socket.once('close', () => clearTimeout(timer));
  socket.resume();
}
