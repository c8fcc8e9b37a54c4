/**
 * The connections other shard workers accepted for this one (a descriptor each, and the bytes
 * read past its CONNECT: src/api/worker-tunnel.ts) while this worker's gRPC server does not
 * serve yet: the workers start serving one after another, and a peer's connection may name a
 * worker that has not. They wait here until it does (`serve`).
 *
 * The list is fed by the network: a CONNECT names a worker and carries no secret, and the worker
 * that accepted the connection gives its slot of `rpc.max_connections` back as it hands the
 * descriptor on (front-end.ts `handOff`), so nothing else counts what waits here. Unbounded, a
 * client sending CONNECTs for a worker not yet serving made the process hold a descriptor for
 * each, out of the few kept beside the tables and the connections (open-files.ts
 * OTHER_DESCRIPTORS), which the WAL and the compactions need; and a worker that never served
 * (its start failed or hung) held them until the process ended. So at most `max` wait, a
 * connection past it is closed as it comes (its peer dials again), each waits `maxWaitMs` at
 * most (its handshake's time, `rpc.handshake_timeout_ms`: the front end would close it then
 * too), and `close` closes them all.
 */
import { closeSync } from "node:fs";

export interface WaitingConnectionsOptions {
  /** The connections that may wait at once. */
  readonly max: number;
  /** How long one may wait for the server to serve before it is closed. */
  readonly maxWaitMs: number;
  /** Closes a descriptor this thread owns (closeSync; a test's recorder). */
  readonly close?: (fd: number) => void;
}

/**
 * The connections waiting in a node's shard workers together, beside everything else in
 * OTHER_DESCRIPTORS (512): a worker of N keeps 1/N of them, at least 4. A peer whose connection
 * was closed for want of room dials again, by then most likely to a worker that serves.
 */
export const WAITING_CONNECTIONS = 64;

/** What one worker of `count` keeps waiting: its share of WAITING_CONNECTIONS. */
export function waitingConnectionsOf(count: number): number {
  return Math.max(4, Math.floor(WAITING_CONNECTIONS / Math.max(1, count)));
}

export class WaitingConnections {
  readonly #max: number;
  readonly #maxWaitMs: number;
  readonly #closeFd: (fd: number) => void;
  /** In the order they came, so the first is the first to run out of time. */
  #waiting: { readonly fd: number; readonly rest: Buffer | null; readonly until: number }[] = [];
  #adopt: ((fd: number, rest: Buffer | null) => void) | null = null;
  #closed = false;
  /** Armed for the first connection's end of wait while any waits. */
  #timer: NodeJS.Timeout | null = null;

  constructor(options: WaitingConnectionsOptions) {
    this.#max = options.max;
    this.#maxWaitMs = options.maxWaitMs;
    this.#closeFd = options.close ?? closeSync;
  }

  /** The connections waiting. */
  get size(): number {
    return this.#waiting.length;
  }

  /**
   * A connection handed over: served at once when the server serves, else kept to be; closed
   * when the list is full or closed.
   */
  add(fd: number, rest: Buffer | null): void {
    if (this.#closed || (this.#adopt === null && this.#waiting.length >= this.#max)) {
      this.#closeQuietly(fd);
      return;
    }
    if (this.#adopt !== null) {
      this.#adopt(fd, rest);
      return;
    }
    this.#waiting.push({ fd, rest, until: performance.now() + this.#maxWaitMs });
    if (this.#timer === null) this.#arm();
  }

  /** The server serves: `adopt` takes the connections waiting, then each handed over. */
  serve(adopt: (fd: number, rest: Buffer | null) => void): void {
    if (this.#closed) return;
    this.#adopt = adopt;
    this.#disarm();
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const { fd, rest } of waiting) adopt(fd, rest);
  }

  /**
   * Closes every connection waiting, and each handed over from now on: the worker will not
   * serve them (its start failed, or it stops).
   */
  close(): void {
    this.#closed = true;
    this.#adopt = null;
    this.#disarm();
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const { fd } of waiting) this.#closeQuietly(fd);
  }

  /** Closes the connections whose wait ended, and arms the timer for the next one's. */
  readonly #expire = (): void => {
    this.#timer = null;
    const now = performance.now();
    const ended = this.#waiting.findIndex((w) => w.until > now);
    const gone = this.#waiting.splice(0, ended === -1 ? this.#waiting.length : ended);
    for (const { fd } of gone) this.#closeQuietly(fd);
    if (this.#waiting.length > 0) this.#arm();
  };

  #arm(): void {
    const first = this.#waiting[0];
    if (first === undefined) return;
    this.#timer = setTimeout(this.#expire, Math.max(0, first.until - performance.now()));
    // The worker's ports keep its thread alive while it runs; this timer alone must not.
    this.#timer.unref();
  }

  #disarm(): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
  }

  /** A descriptor already closed (EBADF) changes nothing: it is no longer held either way. */
  #closeQuietly(fd: number): void {
    try {
      this.#closeFd(fd);
    } catch {
      // Nothing more to give back.
    }
  }
}
