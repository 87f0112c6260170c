/**
 * nginx for the benchmarks: writes a self-contained configuration (no access log, its own pid,
 * error log and temp folders under `dir`), starts nginx in the foreground (optionally pinned to
 * some CPUs with taskset) and stops it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { childPids } from './cpu.ts';
import { waitForPort } from './net.ts';

export interface NginxServer {
  /** "127.0.0.61:8080" */
  listen: string;
  /** Directives of the `server` block (before `location /`). */
  directives?: string;
  /** Directives of `location /`. */
  location: string;
}

export interface NginxUpstream {
  name: string;
  server: string;
  keepalive: number;
}

export interface NginxConfig {
  /** Folder of the configuration, pid, logs and temp files (nginx's prefix). */
  dir: string;
  /** Names the files: <name>.conf, <name>.pid, <name>-error.log. */
  name: string;
  /** worker_processes; default 1. */
  workers?: number;
  /** Absolute paths of dynamic modules to load. */
  loadModules?: readonly string[];
  upstreams?: readonly NginxUpstream[];
  servers: readonly NginxServer[];
}

/** `location /` of an origin answering `body` as text/plain from memory. */
export function originLocation(body: string): string {
  return `default_type text/plain;
      return 200 "${body.replaceAll('\\', '\\\\').replaceAll('"', '\\"').replaceAll('\n', '\\n')}";`;
}

/** `location /` of a reverse proxy to an upstream, keep-alive, with the forwarding headers our proxy adds too. */
export function proxyLocation(upstream: string): string {
  return `proxy_pass http://${upstream};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_set_header X-Forwarded-Host $http_host;
      proxy_set_header X-Request-Id $request_id;`;
}

/** Writes <dir>/<name>.conf and returns its path. */
export function writeNginxConf(config: NginxConfig): string {
  const { dir, name } = config;
  const conf = path.join(dir, `${name}.conf`);
  const temp = path.join(dir, `${name}-temp`);
  // Workers run as nobody when nginx starts as root: they must be able to write there.
  fs.mkdirSync(temp, { recursive: true, mode: 0o777 });
  fs.chmodSync(temp, 0o777);
  const modules = (config.loadModules ?? []).map((m) => `load_module ${m};\n`).join('');
  const upstreams = (config.upstreams ?? [])
    .map((u) => `  upstream ${u.name} { server ${u.server}; keepalive ${u.keepalive}; }\n`)
    .join('');
  const servers = config.servers
    .map(
      (s) => `  server {
    listen ${s.listen};
${s.directives ? `    ${s.directives.trim().split('\n').join('\n    ')}\n` : ''}    location / {
      ${s.location}
    }
  }
`,
    )
    .join('');
  fs.writeFileSync(
    conf,
    `${modules}worker_processes ${config.workers ?? 1};
daemon off;
pid ${dir}/${name}.pid;
error_log ${dir}/${name}-error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path ${temp}/body;
  proxy_temp_path ${temp}/proxy;
  fastcgi_temp_path ${temp}/fastcgi;
  uwsgi_temp_path ${temp}/uwsgi;
  scgi_temp_path ${temp}/scgi;
${upstreams}${servers}}
`,
  );
  return conf;
}

export interface NginxProcess {
  readonly child: ChildProcess;
  /** The master's pid. */
  readonly pid: number;
  /** The worker processes' pids. */
  workerPids(): number[];
  /** SIGTERM, then SIGKILL if it is still there after 3 s. */
  stop(): Promise<void>;
}

/**
 * Starts `nginx -c conf -p dir` in the foreground and waits until every address in `listen`
 * accepts connections. `cpus` ("1", "0-1") pins master and workers with taskset.
 */
export async function startNginx(
  conf: string,
  dir: string,
  listen: readonly string[],
  options: { cpus?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<NginxProcess> {
  const args = ['-c', conf, '-p', dir];
  const spawnOptions = { stdio: ['ignore', 'ignore', 'inherit'] as ['ignore', 'ignore', 'inherit'], env: options.env ?? process.env };
  const child = options.cpus ? spawn('taskset', ['-c', options.cpus, 'nginx', ...args], spawnOptions) : spawn('nginx', args, spawnOptions);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const running: NginxProcess = {
    child,
    pid: child.pid!,
    workerPids: () => childPids(child.pid!),
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
      await exited;
      clearTimeout(timer);
    },
  };
  let ready = false;
  const exitedEarly = exited.then(() => {
    if (!ready) throw new Error(`nginx exited with code ${child.exitCode} (see ${dir}/${path.basename(conf, '.conf')}-error.log)`);
  });
  exitedEarly.catch(() => {});
  try {
    for (const address of listen) {
      const up = waitForPort(address);
      up.catch(() => {});
      await Promise.race([up, exitedEarly]);
    }
    ready = true;
  } catch (error) {
    await running.stop();
    throw error;
  }
  return running;
}
