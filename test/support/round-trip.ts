/**
 * One TCP exchange with an echo behind a proxy: connects (from `localAddress` when given), sends
 * `text`, and resolves with the first reply, 'CLOSED' when the connection closed or failed before
 * any reply (a proxy refusing the client), or 'TIMEOUT' after 5 s.
 */
import net from 'node:net';

export function roundTrip(target: { host: string; port: number; localAddress?: string }, text: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(target);
    const timer = setTimeout(() => finish('TIMEOUT'), 5_000);
    const finish = (reply: string) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(reply);
    };
    socket.once('data', (chunk) => finish(chunk.toString()));
    socket.once('close', () => finish('CLOSED'));
    socket.once('error', () => finish('CLOSED'));
    socket.write(text);
  });
}
