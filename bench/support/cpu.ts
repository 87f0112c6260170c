/**
 * CPU time of processes, read from /proc (Linux): user + system time, all threads of a process
 * included (the process line of /proc/<pid>/stat sums its threads).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';

let ticksPerSecond: number | undefined;

/** Clock ticks per second of the /proc counters (CLK_TCK, 100 on Linux). */
function clockTicks(): number {
  if (ticksPerSecond === undefined) {
    try {
      ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  return ticksPerSecond;
}

/** CPU seconds (user + system) used so far by one process, every thread of it; 0 when it is gone. */
export function processCpuSeconds(pid: number): number {
  let stat: string;
  try {
    stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return 0;
  }
  // Fields after "(comm)": state is field 3, utime 14, stime 15 (man 5 proc).
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / clockTicks();
}

/** Direct child processes of a process (of every thread of it). */
export function childPids(pid: number): number[] {
  const children: number[] = [];
  let tasks: string[];
  try {
    tasks = fs.readdirSync(`/proc/${pid}/task`);
  } catch {
    return children;
  }
  for (const tid of tasks) {
    try {
      const list = fs.readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim();
      if (list) for (const child of list.split(/\s+/)) children.push(Number(child));
    } catch {
      // thread gone
    }
  }
  return children;
}

/** A process and all its descendants. */
export function processTree(pid: number): number[] {
  const pids = [pid];
  for (let i = 0; i < pids.length; i++) pids.push(...childPids(pids[i]!));
  return pids;
}

/** CPU seconds used so far by a process and all its living descendants (nginx: master + workers). */
export function treeCpuSeconds(pid: number): number {
  let total = 0;
  for (const p of processTree(pid)) total += processCpuSeconds(p);
  return total;
}

/** CPU seconds of each thread of a process, with the thread's name (/proc/<pid>/task/<tid>/comm). */
export function threadCpuSeconds(pid: number): { tid: number; name: string; seconds: number }[] {
  const threads: { tid: number; name: string; seconds: number }[] = [];
  let tasks: string[];
  try {
    tasks = fs.readdirSync(`/proc/${pid}/task`);
  } catch {
    return threads;
  }
  for (const tid of tasks) {
    try {
      const name = fs.readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
      const stat = fs.readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      threads.push({ tid: Number(tid), name, seconds: (Number(fields[11]) + Number(fields[12])) / clockTicks() });
    } catch {
      // thread gone
    }
  }
  return threads;
}

/** The CPUs this process may run on (Cpus_allowed_list of /proc/self/status), ascending. */
export function allowedCpus(): number[] {
  const line = /^Cpus_allowed_list:\s*(\S+)/m.exec(fs.readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '0';
  const cpus: number[] = [];
  for (const part of line.split(',')) {
    const [from, to] = part.split('-').map(Number) as [number, number | undefined];
    for (let cpu = from; cpu <= (to ?? from); cpu++) cpus.push(cpu);
  }
  return cpus;
}
