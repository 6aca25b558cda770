/**
 * memfs as the memory of the official TypeScript worker (`EnvironmentWorker` of `@anthropic-ai/sdk`):
 *
 *   const secrets = takeSecrets();
 *   const lease = new LeaseWatch();
 *   const client = new Anthropic({ apiKey: secrets.apiKey ?? 'unused', middleware: [lease.middleware] });
 *   const worker = new EnvironmentWorker({ client, tools: memfsTools({ lease }), memorySyncIntervalMs: null });
 *   await worker.handleItem({ workSecret: secrets.workSecret, environmentKey: secrets.environmentKey });
 *
 * run as `memfs worker-launch -- node worker.js`, which starts node non-dumpable with the
 * credentials on a pipe (`takeSecrets()`), out of reach of the agent's processes.
 *
 * The same behaviour as the Python factory (memfs/worker/tools.py), per session:
 * 1. the stores mounted at the root must be exactly the session's memory stores (ids, folders,
 *    access), else the factory throws and the work item fails with a message saying what differs;
 * 2. their folders go on the file tools' `allowedRoots`, the read_only ones on `readOnlyRoots`;
 * 3. every tool call first asks the mount's daemon for a non-forced sync over its socket (a tick
 *    runs only when one is due), so remote edits are seen between calls;
 * 4. a `write` or `edit` whose result would not fit in a memory is refused before the file is touched;
 * 5. when the session runner closes its tools (once, when it stops) the last close runs the final
 *    sync: forced, waiting for uploads, bounded by 30 s — unless the lease was lost (LeaseWatch),
 *    when another worker owns the session's memory now.
 * The daemon's socket protocol is docs/API.md's "The daemon's socket".
 */
import * as fs from 'node:fs/promises';
import { closeSync, lstatSync, openSync, readFileSync, readSync, readlinkSync, realpathSync, writeSync } from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import type { Middleware } from '@anthropic-ai/sdk';
import type { BetaRunnableTool } from '@anthropic-ai/sdk/lib/tools/BetaRunnableTool';
import { ToolError } from '@anthropic-ai/sdk/lib/tools/ToolError';
import {
  type AgentToolContext,
  betaAgentToolset20260401,
  resolvePath,
} from '@anthropic-ai/sdk/tools/agent-toolset/node';

export const DEFAULT_ROOT = '/mnt/memory';
/** A memory holds at most this many bytes of UTF-8 text (memfs/limits.py, MAX_CONTENT_BYTES). */
export const MAX_CONTENT_BYTES = 100 * 1024;
/** The final sync's bound (memfs/limits.py, FLUSH_TIMEOUT); the answer gets 5 s more. */
export const FINAL_SYNC_TIMEOUT_MS = 30_000;
/** A due tick pulls before it answers: bounded by the mount's own request timeouts. */
export const PRE_CALL_TIMEOUT_MS = 20_000;
/** A write-through is up to seven rounds (a read and a push each: memfs/sync/write_through.py, TRIES) of
 *  one store: bounded like a pre-call sync. */
export const WRITE_THROUGH_TIMEOUT_MS = 20_000;
const CONNECT_TIMEOUT_MS = 2_000;
const STATUS_TIMEOUT_MS = 10_000;
/** How long a tool call waits for a sign of life (the ping's answer) before it runs without the sync
 *  (memfs/worker/daemon_link.py, PRE_CALL_PING_TIMEOUT): a live daemon answers a ping at once. */
export const PRE_CALL_PING_TIMEOUT_MS = 2_000;
/** The same for every other request (memfs/session/control.py, PING_TIMEOUT). */
export const PING_TIMEOUT_MS = 5_000;
/** How long an answer may take before a ping on a second connection checks the daemon is alive. */
const ANSWER_PATIENCE_MS = 100;
/** The sandbox image's sync-only socket (sync and status only), as for the Python worker. */
export const SOCKET_ENV = 'MEMFS_SYNC_SOCKET';

export class MemfsSessionError extends Error {}
export class DaemonUnavailable extends Error {}

type Log = (level: 'info' | 'warn' | 'error', message: string) => void;
const defaultLog: Log = (level, message) => console[level](`memfs.worker: ${message}`);

// -- the worker's credentials (docs/OPERATIONS.md 7.3, "Security") -----------------------------------

/** The pipe `memfs worker-launch` hands the credentials over on (memfs/worker/launch.py). */
export const SECRETS_FD_ENV = 'MEMFS_SECRETS_FD';
const SECRET_NAMES = [
  'ANTHROPIC_WORK_SECRET',
  'ANTHROPIC_ENVIRONMENT_KEY',
  'ANTHROPIC_API_KEY',
  'ANTHROPIC_AUTH_TOKEN',
  'MEMFS_TOKEN',
] as const;

export interface WorkerSecrets {
  /** For `handleItem({ workSecret })`. */
  workSecret?: string;
  /** For `new EnvironmentWorker({ environmentKey })` or `handleItem({ environmentKey })`. */
  environmentKey?: string;
  /** For `new Anthropic({ apiKey })`. */
  apiKey?: string;
  /** For `new Anthropic({ authToken })`. */
  authToken?: string;
  /** Whether they came from `memfs worker-launch`, which made this process non-dumpable. */
  launched: boolean;
}

/** The worker's credentials, taken out of reach of the agent's processes: read from the pipe of
 *  `memfs worker-launch` (then closed), or else from the environment. Either way no ANTHROPIC_*
 *  credential is left in `process.env` (children would inherit it) nor in the environment block
 *  /proc/<pid>/environ shows (overwritten through /proc/self/mem: deleting from process.env only
 *  drops libc's pointer to it). Give them to the SDK as options. Without the launcher node stays
 *  dumpable, and a process of the same uid can still read them from /proc/<pid>/mem: a warning
 *  says so. Call it once, before anything is spawned. */
export function takeSecrets(log: Log = defaultLog): WorkerSecrets {
  const values: Record<string, string> = {};
  const fdText = process.env[SECRETS_FD_ENV];
  delete process.env[SECRETS_FD_ENV];
  let launched = false;
  if (fdText !== undefined && /^\d+$/.test(fdText)) {
    const fd = Number(fdText);
    let handed: any;
    try {
      handed = JSON.parse(readFileSync(fd, 'utf8') || '{}');
    } finally {
      closeSync(fd); // an open pipe would be readable through /proc/<pid>/fd, and inherited
    }
    Object.assign(values, handed?.secrets ?? {});
    launched = handed?.non_dumpable === true;
    if (launched) {
      // What the launcher made non-dumpable must be this very process: an exec since (a script's
      // interpreter, `env node …`, npm) made it dumpable again.
      let self = '?';
      try {
        self = readlinkSync('/proc/self/exe');
      } catch {
        // no /proc: the comparison fails below
      }
      if (handed.pid !== process.pid || handed.exe !== self) {
        throw new MemfsSessionError(
          `memfs worker-launch made ${handed.exe} (pid ${handed.pid}) non-dumpable, but its credentials ` +
            `reached ${self} (pid ${process.pid}), which is dumpable: start node itself, ` +
            '`memfs worker-launch -- node worker.js` (not a script, npm or a wrapper that starts or execs node)',
        );
      }
    }
  }
  const present = SECRET_NAMES.filter((name) => process.env[name] !== undefined);
  for (const name of present) {
    values[name] ??= process.env[name]!;
    delete process.env[name];
  }
  if (present.length) wipeEnvironBlock(present);
  if (!launched) {
    log(
      'warn',
      'node is dumpable: a process of the same uid (the agent\'s bash) can read the credentials from ' +
        '/proc/<pid>/mem; start the worker with `memfs worker-launch -- node …` (docs/OPERATIONS.md 7.3)',
    );
  }
  const pick = (name: string) => values[name] || undefined;
  return {
    workSecret: pick('ANTHROPIC_WORK_SECRET'),
    environmentKey: pick('ANTHROPIC_ENVIRONMENT_KEY'),
    apiKey: pick('ANTHROPIC_API_KEY'),
    authToken: pick('ANTHROPIC_AUTH_TOKEN'),
    launched,
  };
}

/** Overwrite the values of `names` in the environment block the process started with (what
 *  /proc/<pid>/environ shows), through /proc/self/mem as memfs/secret_env.py does. Best effort. */
function wipeEnvironBlock(names: readonly string[]): void {
  let fd: number | undefined;
  try {
    const stat = readFileSync('/proc/self/stat', 'latin1');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const start = Number(fields[47]); // env_start, the stat file's field 50
    const end = Number(fields[48]); // env_end, field 51
    if (!(end > start)) return;
    fd = openSync('/proc/self/mem', 'r+');
    const block = Buffer.alloc(end - start);
    readSync(fd, block, 0, block.length, start);
    for (const name of names) {
      const prefix = Buffer.from(`${name}=`);
      for (let at = block.indexOf(prefix); at >= 0; at = block.indexOf(prefix, at + 1)) {
        if (at > 0 && block[at - 1] !== 0) continue; // inside another variable's value
        const from = at + prefix.length;
        const to = block.indexOf(0, from) < 0 ? block.length : block.indexOf(0, from);
        if (to > from) writeSync(fd, Buffer.alloc(to - from), 0, to - from, start + from);
      }
    }
  } catch {
    // no /proc here: nothing shows the block either
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

// -- finding the daemon's socket (memfs/session/control.py) ----------------------------------------

function runtimeDir(): string {
  return process.env.MEMFS_RUNTIME_DIR || (process.getuid?.() === 0 ? '/run/memfs' : `/tmp/memfs-${process.getuid?.()}`);
}

/** Why the registry dir cannot be trusted, or undefined (memfs/session/control.py,
 *  runtime_dir_problem): another local user who made /tmp/memfs-<uid> first (or a symlink there)
 *  would otherwise choose the socket this worker's syncs go to. Root's own directories are trusted. */
export function runtimeDirProblem(dir: string): string | undefined {
  let st;
  try {
    st = lstatSync(dir);
  } catch {
    return undefined; // none: no registry entry, the default state dir
  }
  const me = process.geteuid?.() ?? -1;
  if (!st.isDirectory()) return `the memfs registry dir ${dir} is not a directory (a symlink or a file)`;
  if (st.uid !== me && st.uid !== 0) {
    return (
      `the memfs registry dir ${dir} belongs to uid ${st.uid}, not to you (uid ${me}): another user may ` +
      'have made it to redirect memfs commands; remove it, or set MEMFS_RUNTIME_DIR to a directory of yours'
    );
  }
  if (st.mode & 0o022) {
    return (
      `the memfs registry dir ${dir} is writable by other users (mode 0o${(st.mode & 0o777).toString(8)}); ` +
      `make it private: chmod 700 ${dir}`
    );
  }
  return undefined;
}

/** The root's name in the registry: absolute, normalised, symlinks resolved in its parents only
 *  (never in the root itself: a stopped mount would hang that call). */
export function registryKey(root: string): string {
  const abs = path.resolve(root);
  const parent = path.dirname(abs);
  const name = path.basename(abs);
  if (!name) return abs;
  let real = parent;
  try {
    real = realpathSync(parent);
  } catch {
    // a parent that does not exist: the name as given, as Python's realpath does
  }
  return path.join(real, name);
}

export function stateDirOf(root: string): string {
  const key = registryKey(root);
  const problem = runtimeDirProblem(runtimeDir());
  if (problem) throw new MemfsSessionError(problem);
  const file = path.join(runtimeDir(), `${createHash('sha256').update(key).digest('hex').slice(0, 20)}.json`);
  try {
    const entry = JSON.parse(readFileSync(file, 'utf8'));
    if (entry && typeof entry.state_dir === 'string') return entry.state_dir;
  } catch {
    // no registry entry: the default state dir of that root
  }
  const name = key.replace(/^\/+|\/+$/g, '').replace(/\//g, '_') || 'root';
  const base = process.getuid?.() === 0 ? '/var/lib/memfs' : path.join(os.homedir(), '.local/state/memfs');
  return path.join(base, name);
}

// -- the link: JSON lines on one held connection ---------------------------------------------------

type Answer = Record<string, any>;

/** One request in flight at a time on one held unix-socket connection (answers come back in order;
 *  a request given up half-way leaves its answer unread, so that connection is dropped). A held
 *  connection found closed (the daemon restarted, or closed it when idle) is re-opened once.
 *  Stopped or busy: an answer that has not come within ANSWER_PATIENCE_MS makes the link ping the
 *  daemon on a second connection. The daemon answers a ping from its event loop at once, whatever a
 *  tick is doing, so no answer within the ping's deadline means it is stopped (SIGSTOP) or wedged and
 *  the request gives up then; a live daemon whose due tick pulls still gets the request's whole
 *  timeout (as memfs/worker/daemon_link.py does). */
/** A tool's result with memfs's note after it (a string, or a list of content blocks). */
function noted(result: any, note: string): any {
  if (typeof result === 'string') return `${result}\n\n${note}`;
  if (Array.isArray(result)) return [...result, { type: 'text', text: note }];
  return result;
}

export class DaemonLink {
  readonly socketPath: string;
  #socket: net.Socket | null = null;
  #buf = '';
  #waiting: ((line: string | Error) => void) | null = null;
  #queue: Promise<unknown> = Promise.resolve();

  constructor(readonly root: string) {
    this.socketPath = process.env[SOCKET_ENV] || path.join(stateDirOf(root), 'control.sock');
  }

  request(request: Answer, timeoutMs: number, pingMs: number = PING_TIMEOUT_MS): Promise<Answer> {
    const ping = Math.max(1, Math.min(pingMs, timeoutMs));
    const turn = this.#queue.then(() => this.#exchangeWithRetry(request, timeoutMs, ping));
    this.#queue = turn.catch(() => undefined);
    return turn;
  }

  sync(force: boolean, wait: boolean, timeoutMs: number, pingMs: number = PRE_CALL_PING_TIMEOUT_MS): Promise<Answer> {
    return this.request({ op: 'sync', force, wait }, timeoutMs, pingMs);
  }

  status(timeoutMs = STATUS_TIMEOUT_MS): Promise<Answer> {
    return this.request({ op: 'status' }, timeoutMs);
  }

  /** Push the memory file at `filePath` now (docs/SEMANTICS.md#d-merge); the answer says what became of it. */
  writeThrough(filePath: string, timeoutMs = WRITE_THROUGH_TIMEOUT_MS): Promise<Answer> {
    return this.request({ op: 'write_through', path: filePath }, timeoutMs);
  }

  close(): void {
    this.#drop();
  }

  async #exchangeWithRetry(request: Answer, timeoutMs: number, pingMs: number): Promise<Answer> {
    const held = this.#socket !== null;
    try {
      return await this.#exchange(request, timeoutMs, pingMs);
    } catch (e) {
      if (!(e instanceof Broken) || !held) throw this.#unavailable(e);
      try {
        return await this.#exchange(request, timeoutMs, pingMs); // once more, on a fresh connection
      } catch (e2) {
        throw this.#unavailable(e2);
      }
    }
  }

  #unavailable(e: unknown): Error {
    if (e instanceof DaemonUnavailable) return e;
    return new DaemonUnavailable(`the memfs daemon of ${this.root} did not answer: ${(e as Error).message}`);
  }

  async #exchange(request: Answer, timeoutMs: number, pingMs: number): Promise<Answer> {
    const socket = this.#socket ?? (await this.#connect());
    const line = await new Promise<string>((resolve, reject) => {
      let settled = false;
      const giveUp = (why: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        clearTimeout(patience);
        this.#waiting = null;
        this.#drop(); // its answer may still come: that connection is not reused
        reject(why);
      };
      const timer = setTimeout(
        () => giveUp(new DaemonUnavailable(`the memfs daemon of ${this.root} did not answer ${request.op} within ${timeoutMs / 1000}s`)),
        timeoutMs,
      );
      // The answer almost always comes at once (no tick due): no ping. Only when it does not is a
      // second connection asked whether the daemon is alive (a due tick pulls) or stopped.
      const patience = setTimeout(() => {
        this.#ping(pingMs).then(
          (alive) => {
            if (!alive) {
              giveUp(
                new DaemonUnavailable(
                  `the memfs daemon of ${this.root} did not answer a ping within ${pingMs / 1000}s ` +
                    `(stopped or hung?); it was asked at ${this.socketPath}`,
                ),
              );
            }
          },
          () => undefined,
        );
      }, Math.min(ANSWER_PATIENCE_MS, pingMs));
      this.#waiting = (got) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        clearTimeout(patience);
        this.#waiting = null;
        if (got instanceof Error) reject(got);
        else resolve(got);
      };
      socket.write(JSON.stringify(request) + '\n');
      this.#deliver();
    });
    const answer = JSON.parse(line);
    if (typeof answer !== 'object' || answer === null) {
      throw new DaemonUnavailable(`the memfs daemon of ${this.root} answered ${request.op} with ${line}`);
    }
    // A failed tick answers {"ok": false, "ran": true, ...}: a result. Anything else not ok is a refusal.
    if (!answer.ok && !('ran' in answer)) {
      this.#drop(); // a refusal ("busy") ends that connection on the daemon's side
      throw new DaemonUnavailable(`the memfs daemon of ${this.root} refused ${request.op}: ${answer.error}`);
    }
    return answer;
  }

  /** A ping on a connection of its own: true when any answer line comes within pingMs. */
  #ping(pingMs: number): Promise<boolean> {
    return new Promise((resolve) => {
      const probe = net.createConnection(this.socketPath);
      let buf = '';
      const done = (alive: boolean) => {
        clearTimeout(timer);
        probe.destroy();
        resolve(alive);
      };
      const timer = setTimeout(() => done(false), pingMs);
      probe.setEncoding('utf8');
      probe.on('connect', () => probe.write('{"op":"ping"}\n'));
      probe.on('data', (chunk: string) => {
        buf += chunk;
        if (buf.includes('\n')) done(true);
      });
      probe.on('error', () => done(false));
      probe.on('close', () => done(buf.includes('\n')));
      probe.unref();
    });
  }

  #connect(): Promise<net.Socket> {
    return new Promise((resolve, reject) => {
      const socket = net.createConnection(this.socketPath);
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new DaemonUnavailable(`no answer at ${this.socketPath} within ${CONNECT_TIMEOUT_MS / 1000}s`));
      }, CONNECT_TIMEOUT_MS);
      socket.once('connect', () => {
        clearTimeout(timer);
        socket.removeAllListeners('error');
        this.#socket = socket;
        this.#buf = '';
        socket.setEncoding('utf8');
        socket.on('data', (chunk: string) => {
          this.#buf += chunk;
          this.#deliver();
        });
        const gone = () => {
          if (this.#socket === socket) this.#socket = null;
          this.#waiting?.(new Broken(`the daemon closed the connection at ${this.socketPath}`));
        };
        socket.on('close', gone);
        socket.on('error', gone);
        socket.unref(); // a held connection must not keep node alive once the worker is done
        resolve(socket);
      });
      socket.once('error', (e) => {
        clearTimeout(timer);
        reject(new DaemonUnavailable(`nothing answers at ${this.socketPath}: ${e.message}`));
      });
    });
  }

  #deliver(): void {
    const i = this.#buf.indexOf('\n');
    if (i < 0 || this.#waiting === null) return;
    const line = this.#buf.slice(0, i);
    this.#buf = this.#buf.slice(i + 1);
    this.#waiting(line);
  }

  #drop(): void {
    const socket = this.#socket;
    this.#socket = null;
    this.#buf = '';
    socket?.destroy();
  }
}

class Broken extends Error {}

// -- the lease --------------------------------------------------------------------------------------

const HEARTBEAT = /\/v1\/environments\/[^/]+\/work\/([^/]+)\/heartbeat(?:\?|$)/;
const RETRYABLE_4XX = new Set([408, 409, 429]);
/** The SDK's assumed TTL before the first heartbeat answer gives the real one (its CLAIM_TIMEOUT_MS). */
const CLAIM_TIMEOUT_MS = 300_000;

/** Whether this worker still holds the work item's lease, read from the heartbeat answers the worker
 *  itself gets, judged as the SDK's lease judges them (lib/internal/environments/lease.ts): a 412 or
 *  any other 4xx it does not retry is a lost lease; no successful heartbeat for a whole TTL means it
 *  must be assumed lost. Install `middleware` on the client given to the worker: its sub-clients
 *  keep the parent's middleware. */
export class LeaseWatch {
  readonly #beats = new Map<string, { lastOk: number; ttlMs: number; failing: boolean; lost: boolean }>();
  readonly #installedAt = Date.now();
  #latest: string | undefined;

  readonly middleware: Middleware = async (request, next) => {
    const response = await next(request);
    const m = HEARTBEAT.exec(request.url);
    if (m) {
      try {
        await this.#record(m[1]!, response.clone());
      } catch {
        // a watch must never break the worker's own request
      }
    }
    return response;
  };

  async #record(workId: string, response: Response): Promise<void> {
    const now = Date.now();
    let beat = this.#beats.get(workId);
    if (!beat) {
      beat = { lastOk: response.ok ? now : this.#installedAt, ttlMs: CLAIM_TIMEOUT_MS, failing: false, lost: false };
      this.#beats.set(workId, beat);
    }
    this.#latest = workId;
    if (response.status >= 400 && response.status < 500 && !RETRYABLE_4XX.has(response.status)) {
      beat.lost = true;
      return;
    }
    if (!response.ok) {
      beat.failing = true;
      return;
    }
    beat.lastOk = now;
    beat.failing = false;
    const ttl = Number((await response.json())?.ttl_seconds);
    if (ttl > 0) beat.ttlMs = ttl * 1000;
  }

  /** True once the item's lease is known, or must be assumed, to belong to someone else. */
  lost(workId: string | undefined = process.env.ANTHROPIC_WORK_ID || this.#latest): boolean {
    const beat = workId ? this.#beats.get(workId) : undefined;
    if (!beat) return false;
    return beat.lost || (beat.failing && Date.now() - beat.lastOk > beat.ttlMs);
  }
}

// -- the tools factory ------------------------------------------------------------------------------

export interface MemfsToolsOptions {
  /** Where `memfs mount` mounted the session's stores (default /mnt/memory). */
  root?: string;
  /** The toolset to wrap: a factory called with the session's context, or a list (default: the
   *  official `agent_toolset_20260401` tools). */
  base?: ((ctx: AgentToolContext) => BetaRunnableTool[]) | BetaRunnableTool[];
  /** The lease watch installed on the worker's client: without it the final sync always runs. */
  lease?: LeaseWatch;
  log?: Log;
}

type Stores = Map<string, { slug: string; access: string }>;

function expectedStores(ctx: AgentToolContext): Stores {
  const out: Stores = new Map();
  for (const r of ((ctx.session as any)?.resources ?? []) as any[]) {
    if (r?.type !== 'memory_store') continue;
    const mountPath = String(r.mount_path ?? '').replace(/\/+$/, '');
    out.set(r.memory_store_id, { slug: mountPath.split('/').pop() ?? '', access: r.access ?? 'read_write' });
  }
  return out;
}

function describe(stores: Stores): string {
  if (stores.size === 0) return 'none';
  return [...stores.entries()]
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([id, s]) => `${id} at ${s.slug || '?'} (${s.access})`)
    .join(', ');
}

function sameStores(a: Stores, b: Stores): boolean {
  if (a.size !== b.size) return false;
  for (const [id, s] of a) {
    const o = b.get(id);
    if (!o || o.slug !== s.slug || o.access !== s.access) return false;
  }
  return true;
}

/** A `tools` factory for `new EnvironmentWorker({ tools: memfsTools(), memorySyncIntervalMs: null })`. */
export function memfsTools(options: MemfsToolsOptions = {}): (ctx: AgentToolContext) => BetaRunnableTool[] {
  const root = options.root ?? DEFAULT_ROOT;
  const log = options.log ?? defaultLog;
  if (process.env[SECRETS_FD_ENV] !== undefined) {
    // The launcher's pipe is still open: every child (the agent's bash) would inherit it.
    throw new MemfsSessionError(
      '`memfs worker-launch` handed the credentials over on a pipe that nothing read: call takeSecrets() ' +
        'before memfsTools() and give them to the SDK (handleItem({ workSecret }))',
    );
  }
  return (ctx) => {
    // Before the tools are made: the roots go on the context they are made with.
    const memory = SessionMemory.attach(ctx, root, options.lease, log);
    const base = options.base;
    const tools = base === undefined ? betaAgentToolset20260401(ctx) : typeof base === 'function' ? base(ctx) : base;
    return memory ? memory.wrap(tools) : tools;
  };
}

/** The daemon's status, blocking: the worker calls the tools factory synchronously, once a session.
 *  A child node does the one request (the same JSON line as DaemonLink), bounded by timeoutMs. */
function statusSync(socketPath: string, timeoutMs: number): Answer {
  const script = `
    const s = require('node:net').createConnection(process.argv[1]);
    let b = '';
    s.setEncoding('utf8');
    s.on('connect', () => s.write('{"op":"status"}\\n'));
    s.on('data', (d) => { b += d; const i = b.indexOf('\\n'); if (i >= 0) { process.stdout.write(b.slice(0, i)); s.destroy(); } });
    s.on('error', (e) => { process.stderr.write(e.message); process.exit(3); });
    s.on('close', () => { if (!b.includes('\\n')) { process.stderr.write('closed without an answer'); process.exit(3); } });`;
  const r = spawnSync(process.execPath, ['-e', script, socketPath], { timeout: timeoutMs, encoding: 'utf8' });
  if (r.status !== 0) {
    const why = r.error ? r.error.message : r.stderr || `no answer within ${timeoutMs / 1000}s`;
    throw new DaemonUnavailable(`nothing answers at ${socketPath}: ${why}`);
  }
  const answer = JSON.parse(r.stdout);
  if (!answer?.ok) throw new DaemonUnavailable(`the daemon at ${socketPath} refused status: ${answer?.error}`);
  return answer;
}

class SessionMemory {
  readonly link: DaemonLink;
  readonly storeDirs: string[];
  readonly readOnlyDirs: string[];
  #open = 0;
  #finished = false;

  constructor(
    readonly ctx: AgentToolContext,
    readonly root: string,
    readonly expected: Stores,
    readonly lease: LeaseWatch | undefined,
    readonly log: Log,
  ) {
    this.link = new DaemonLink(root);
    this.storeDirs = [...expected.values()].map((s) => path.join(root, s.slug));
    this.readOnlyDirs = [...expected.values()].filter((s) => s.access === 'read_only').map((s) => path.join(root, s.slug));
  }

  get sessionId(): string | undefined {
    return (this.ctx.session as any)?.id;
  }

  /** Check the mount against the session and put its stores on the tools' roots; undefined when the
   *  session has no memory stores and nothing is mounted (plain tools then). */
  static attach(ctx: AgentToolContext, root: string, lease: LeaseWatch | undefined, log: Log): SessionMemory | undefined {
    const expected = expectedStores(ctx);
    const memory = new SessionMemory(ctx, root, expected, lease, log);
    let status: Answer;
    try {
      status = statusSync(memory.link.socketPath, STATUS_TIMEOUT_MS);
    } catch (e) {
      if (expected.size === 0) return undefined;
      throw new MemfsSessionError(
        `this session has memory stores attached (${describe(expected)}) but no memfs mount answers ` +
          `at ${root}: ${(e as Error).message}. Mount them before the worker starts: memfs mount --root ${root} ` +
          '(with ANTHROPIC_BASE_URL, ANTHROPIC_SESSION_ID and ANTHROPIC_WORK_SECRET of this work item)',
      );
    }
    const mounted: Stores = new Map();
    for (const s of status.stores ?? []) mounted.set(s.store_id, { slug: s.slug, access: s.access });
    if (!sameStores(mounted, expected)) {
      throw new MemfsSessionError(
        `the memory stores mounted at ${root} are not this session's: the session ${memory.sessionId} ` +
          `attaches ${describe(expected)}; the mount holds ${describe(mounted)}. Mount this session's ` +
          `stores (memfs unmount --root ${root}; then memfs mount --root ${root} --session-id <this session>) ` +
          'or give the worker the right root',
      );
    }
    ctx.allowedRoots = [...(ctx.allowedRoots ?? []), ...memory.storeDirs];
    ctx.readOnlyRoots = [...(ctx.readOnlyRoots ?? []), ...memory.readOnlyDirs];
    log('info', `session ${memory.sessionId}: memory from memfs at ${root} (${describe(expected)})`);
    return memory;
  }

  wrap(tools: BetaRunnableTool[]): BetaRunnableTool[] {
    this.#open = tools.length;
    return tools.map((inner) => {
      const wrapped: BetaRunnableTool = Object.assign(Object.create(Object.getPrototypeOf(inner)), inner);
      wrapped.run = async (args: any, context?: any) => {
        await this.beforeCall(inner.name as string, args ?? {});
        // A call stopped while its pre-call sync ran (the runner aborts its signal) does nothing: the
        // file tools do not look at the signal themselves, and the runner reports the stop.
        context?.signal?.throwIfAborted();
        const result = await inner.run(args, context);
        return this.afterCall(inner.name as string, args ?? {}, result);
      };
      wrapped.close = async () => {
        try {
          await inner.close?.();
        } finally {
          await this.toolClosed();
        }
      };
      return wrapped;
    });
  }

  async beforeCall(name: string, input: Record<string, unknown>): Promise<void> {
    try {
      const answer = await this.link.sync(false, false, PRE_CALL_TIMEOUT_MS);
      if (answer.ran && !answer.ok) this.log('warn', `pre-call sync before ${name}: the tick failed: ${answer.error}`);
    } catch (e) {
      // The tool still runs: it fails on its own I/O if the mount is gone, and says so.
      this.log('warn', `pre-call sync before ${name} failed: ${(e as Error).message}`);
    }
    if (name === 'write') await this.#refuseOversizedWrite(input);
    else if (name === 'edit') await this.#refuseOversizedEdit(input);
  }

  /** A `write`/`edit` of a memory file that went through is pushed now and the agent told, in band,
   *  what became of it (docs/SEMANTICS.md#d-merge; memfs/worker/tools.py does the same). */
  async afterCall(name: string, input: Record<string, unknown>, result: any): Promise<any> {
    if (name !== 'write' && name !== 'edit') return result;
    const target = await this.#memoryFile(input.file_path);
    if (target === undefined) return result;
    for (const dir of this.readOnlyDirs) {
      const real = await fs.realpath(dir).catch(() => dir);
      if (target === real || target.startsWith(real + path.sep)) return result;
    }
    const shown = String(input.file_path);
    let answer: Answer;
    try {
      answer = await this.link.writeThrough(target);
    } catch (e) {
      this.log('warn', `write-through of ${target} failed: ${(e as Error).message}`);
      return noted(result, `memfs: ${shown} is written here but was not pushed to the memory store now (the mount did not answer); it goes out with the next sync.`);
    }
    switch (answer.result) {
      case 'merged':
        return noted(result, `memfs: the memory store had a newer version of ${shown}; your change was merged with it and the merge is on the store. Read the file again to see it whole.`);
      case 'conflict': {
        const where = answer.copy ? `yours is kept on the store beside it as ${answer.copy}` : "yours is kept in the mount's state dir";
        throw new ToolError(
          `${name}: ${shown}: another writer changed the same lines of this memory file on the store meanwhile. ` +
            `The file now holds the store's version; ${where}. Read the file again before you retry.`,
        );
      }
      case 'gone':
        throw new ToolError(
          `${name}: ${shown}: the memory was deleted on the store meanwhile (${answer.details}); your version is ` +
            "kept in the mount's state dir. Write the file again to create it anew.",
        );
      case 'staged':
        return noted(result, `memfs: ${shown} is written here but not on the memory store yet (${answer.error}); it goes out with the next sync.`);
      default:
        return result;
    }
  }

  async #memoryFile(filePath: unknown): Promise<string | undefined> {
    if (typeof filePath !== 'string') return undefined;
    let target: string;
    try {
      target = await resolvePath(this.ctx, filePath);
    } catch {
      return undefined; // the tool itself refuses it, with its own message
    }
    for (const dir of this.storeDirs) {
      const real = await fs.realpath(dir).catch(() => dir);
      if (target === real || target.startsWith(real + path.sep)) return target;
    }
    return undefined;
  }

  static tooBig(op: string, filePath: string, size: number, what: string): ToolError {
    const n = (x: number) => x.toLocaleString('en-US');
    return new ToolError(
      `${op}: ${filePath}: ${what} would be ${n(size)} bytes, but a memory file holds at most ` +
        `${n(MAX_CONTENT_BYTES)} bytes of UTF-8 text. Nothing was written; the file keeps its ` +
        'current content. Split the content over several smaller files, or shorten it.',
    );
  }

  async #refuseOversizedWrite(input: Record<string, unknown>): Promise<void> {
    const { file_path: filePath, content } = input;
    if (typeof content !== 'string' || (await this.#memoryFile(filePath)) === undefined) return;
    const size = Buffer.byteLength(content, 'utf8');
    if (size > MAX_CONTENT_BYTES) throw SessionMemory.tooBig('write', String(filePath), size, 'the content');
  }

  async #refuseOversizedEdit(input: Record<string, unknown>): Promise<void> {
    const { file_path: filePath, old_string: oldS, new_string: newS, replace_all: all } = input;
    if (typeof oldS !== 'string' || typeof newS !== 'string' || !oldS) return;
    const target = await this.#memoryFile(filePath);
    if (target === undefined) return;
    let text: string;
    try {
      if ((await fs.stat(target)).size > MAX_CONTENT_BYTES) return; // the edit tool's own size rule answers
      text = await fs.readFile(target, 'utf8');
    } catch {
      return; // the tool reports the error itself
    }
    const count = text.split(oldS).length - 1;
    if (count === 0 || (count > 1 && !all)) return; // the tool refuses it with its own message
    const updated = all ? text.split(oldS).join(newS) : text.replace(oldS, () => newS);
    const size = Buffer.byteLength(updated, 'utf8');
    if (size > MAX_CONTENT_BYTES) throw SessionMemory.tooBig('edit', String(filePath), size, 'the edited file');
  }

  /** Called by each wrapped tool's close; the last one runs the final sync. */
  async toolClosed(): Promise<void> {
    this.#open -= 1;
    if (this.#open > 0 || this.#finished) return;
    this.#finished = true;
    try {
      await this.finalSync();
    } finally {
      this.link.close();
    }
  }

  async finalSync(): Promise<void> {
    if (this.lease?.lost()) {
      this.log(
        'warn',
        `session ${this.sessionId}: the work item's lease was lost; no final sync, so this worker does not push ` +
          `over the worker that holds the session now. Staged changes stay in the mount's state dir ` +
          `(memfs status --root ${this.root}).`,
      );
      return;
    }
    const started = Date.now();
    let answer: Answer;
    let status: Answer;
    try {
      answer = await this.link.sync(true, true, FINAL_SYNC_TIMEOUT_MS + 5_000, PING_TIMEOUT_MS);
      status = await this.link.status();
    } catch (e) {
      this.log(
        'error',
        `session ${this.sessionId}: final sync failed: ${(e as Error).message}; \`memfs unmount --root ${this.root}\` retries it`,
      );
      return;
    }
    const staged = (status.stores ?? []).reduce((n: number, s: Answer) => n + (s.staged ?? 0) + (s.refused ?? 0), 0);
    const took = ((Date.now() - started) / 1000).toFixed(2);
    if (answer.ok && !staged) {
      this.log('info', `session ${this.sessionId}: final sync done in ${took}s; every change is on the store service`);
    } else {
      this.log(
        'warn',
        `session ${this.sessionId}: final sync after ${took}s: ${answer.error ?? 'incomplete'}; ${staged} change(s) ` +
          `not on the store yet (\`memfs unmount --root ${this.root}\` retries them and keeps what it cannot upload)`,
      );
    }
  }
}
