/**
 * The node's bound on the connections `rpc_addr` holds open (`rpc.max_connections`), counted
 * across every thread that accepts them: the front end of the main thread, of each I/O thread
 * and of each shard worker (front-end.ts). Every accepted socket holds a file descriptor, and a
 * node out of descriptors cannot open its next WAL segment or write a table: an unbounded
 * number of idle connections from one client ended the node (docs/architecture.md, "The front
 * end against hostile clients"). Past the bound a new connection is closed as soon as it is
 * accepted, the way Redis's `maxclients` and Node's `server.maxConnections` do.
 *
 * The count lives in a SharedArrayBuffer that every thread's copy of ConnectionSlots views
 * (structured cloning shares it): [0] the connections open, [1] those refused since start.
 */

/** What a thread needs to build its ConnectionSlots (it crosses threads in workerData). */
export interface SharedConnectionSlots {
  readonly buffer: SharedArrayBuffer;
  readonly limit: number;
}

const OPEN = 0;
const REFUSED = 1;

export class ConnectionSlots {
  readonly limit: number;
  readonly #cells: Int32Array;
  readonly #buffer: SharedArrayBuffer;

  /** A new count (no `shared`), or a view of one another thread made. */
  constructor(limit: number, shared?: SharedConnectionSlots) {
    if (!Number.isInteger(limit) || limit < 1) {
      throw new RangeError(`ConnectionSlots: the limit must be a positive integer, not ${limit}`);
    }
    this.limit = limit;
    this.#buffer = shared?.buffer ?? new SharedArrayBuffer(2 * Int32Array.BYTES_PER_ELEMENT);
    this.#cells = new Int32Array(this.#buffer);
  }

  /** What another thread needs to share this count. */
  get shared(): SharedConnectionSlots {
    return { buffer: this.#buffer, limit: this.limit };
  }

  /**
   * Takes a slot for a connection just accepted: false (and the refusal counted) when `limit`
   * are open already. A true must be matched by one release().
   */
  take(): boolean {
    if (Atomics.add(this.#cells, OPEN, 1) < this.limit) return true;
    Atomics.sub(this.#cells, OPEN, 1);
    Atomics.add(this.#cells, REFUSED, 1);
    return false;
  }

  /**
   * Takes a slot whatever the count: for a connection another thread took one for and handed
   * on (a shard worker's tunnel), which released its own when it closed its copy.
   */
  adopt(): void {
    Atomics.add(this.#cells, OPEN, 1);
  }

  release(): void {
    Atomics.sub(this.#cells, OPEN, 1);
  }

  /** Connections open now, across the node. */
  get open(): number {
    return Atomics.load(this.#cells, OPEN);
  }

  /** Connections refused since the node started. */
  get refused(): number {
    return Atomics.load(this.#cells, REFUSED);
  }
}
