/** System (kernel) CPU time of a process, read from /proc (Linux), every thread of it included. */
import fs from 'node:fs';

/** CPU seconds spent in the kernel so far by one process (stime), at the usual 100 ticks a second; 0 when it is gone. */
export function systemCpuSeconds(pid: number): number {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after "(comm)": stime is field 15 (man 5 proc).
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[12]) / 100;
  } catch {
    return 0;
  }
}
