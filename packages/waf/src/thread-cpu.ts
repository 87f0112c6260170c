/**
 * This thread's CPU time (user and system, µs): what the inspection budget counts and what fair
 * admission charges a request. A reading is a system call (getrusage, about 0.4 µs): a thread
 * takes one where an inspection starts and one where it ends, and the next inspection of the same
 * batch starts from the last one's end reading (pool/inspector-worker.ts).
 */
export function threadCpuMicros(): number {
  const used = process.threadCpuUsage();
  return used.user + used.system;
}
