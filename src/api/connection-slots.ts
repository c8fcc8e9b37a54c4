/**
 * The node's bounds on the connections `rpc_addr` holds open, counted across every thread that
 * accepts them: the front end of the main thread, of each I/O thread and of each shard worker
 * (front-end.ts).
 *
 * - `rpc.max_connections`, for the node. Every accepted socket holds a file descriptor, and a
 *   node out of descriptors cannot open its next WAL segment or write a table: an unbounded
 *   number of idle connections ended the node (docs/architecture.md, "The front end against
 *   hostile clients"). Past the bound a new connection is closed as soon as it is accepted, the
 *   way Redis's `maxclients` and Node's `server.maxConnections` do.
 * - `rpc.max_connections_per_ip`, for one client address (an IPv6 address by its /64, what one
 *   host is usually given), so that one client (a leak in its connection pool, or an attacker on
 *   one host) cannot fill the node's bound and keep every other client and peer out.
 * - `rpc.max_client_streams`, for the long-lived streaming calls of clients (Meta.WatchCluster,
 *   health Watch, reflection) the front ends proxy to the main thread: each holds ~22 KiB there
 *   and in the front end, and the per-connection bound (`rpc.max_concurrent_streams`) times the
 *   connections allowed is millions of them (20,000 watches took 440 MiB).
 * - `rpc.max_incoming_request_bytes`, for the bytes of unary requests still arriving (their
 *   message not yet whole): a client that announces a 4 MiB message, sends 1 MiB and stalls holds
 *   that megabyte (300 such connections took 467 MiB), and the connections allowed multiply it.
 *   How long a request may hold them is the front end's `rpc.request_receive_timeout_ms`; the
 *   requests it cuts are counted here, for the node's metric. One client address may hold at
 *   most `incomingPerAddress` of them (a quarter of the budget, but at least one whole request),
 *   and in a cluster the last quarter is kept for the members' addresses: one connection could
 *   otherwise fill the budget with 64 half-sent Puts and have every other client's request, and
 *   the peers' unary calls (ReadIndex, ConfirmTerms, ProposeMeta), refused until they timed out.
 *
 * The members' reserve: the last `memberReserve` slots of `rpc.max_connections` (a quarter of it,
 * at most MEMBER_RESERVE) are kept for connections from the cluster's members' addresses
 * (setMembers, from the meta state). Without it, clients on many addresses that filled the bound
 * kept out a peer that had to connect again (it restarted, or a connection broke): every shard
 * that needed it lost its quorum while the flood lasted. A single node (no members set) has no
 * reserve. A client on a member's host (or, for IPv6, its /64) counts as that member.
 *
 * The counts live in a SharedArrayBuffer that every thread's copy of ConnectionSlots views
 * (structured cloning shares it): the connections open, those refused for each bound, and the
 * connections open per address, counted in ADDRESS_BUCKETS buckets by the address's hash. Two
 * addresses that share a bucket share its bound: with 65,536 buckets and a thousand client
 * hosts, a given one has its bucket to itself with probability 0.985; a shared bucket can only
 * refuse early, never let more in.
 */

/** What a thread needs to build its ConnectionSlots (it crosses threads in workerData). */
export interface SharedConnectionSlots {
  readonly buffer: SharedArrayBuffer;
  readonly limit: number;
  /** 0: no bound per address. */
  readonly perAddress: number;
  /** Clients' streaming calls open at once. */
  readonly streams: number;
  /** Bytes of unary requests still arriving, across the node. */
  readonly incomingBytes: number;
  /** The most of them one client address may hold; 0: no bound per address. */
  readonly incomingPerAddress: number;
}

/** Why a connection (or a request's bytes) was refused: the node's bound or its address's. */
export type Refusal = "node" | "address";

/** Whose bytes a request's are (incomingSource): its address's bucket, and whether a member's. */
export interface IncomingSource {
  readonly bucket: number;
  readonly member: boolean;
}

const OPEN = 0;
const REFUSED_NODE = 1;
const REFUSED_ADDRESS = 2;
const STREAMS = 3;
const REFUSED_STREAMS = 4;
const INCOMING = 5;
const REFUSED_INCOMING = 6;
const TOO_SLOW = 7;
const PARTIAL_HEADERS = 8;
/** How many addresses the members' table holds, then the table: each a key's 32-bit hash. */
const MEMBER_COUNT = 9;
const MEMBERS_AT = 10;
export const MEMBER_SLOTS = 128;
const BUCKETS_AT = MEMBERS_AT + MEMBER_SLOTS;
/** The most slots of the node's bound kept for the members' addresses. */
export const MEMBER_RESERVE = 256;
export const ADDRESS_BUCKETS = 1 << 16;
/** Then the bytes of requests still arriving, per address bucket. */
const INCOMING_BUCKETS_AT = BUCKETS_AT + ADDRESS_BUCKETS;
const INT32_MAX = 0x7fffffff;

export class ConnectionSlots {
  readonly limit: number;
  readonly perAddress: number;
  readonly streams: number;
  readonly incomingBytes: number;
  readonly incomingPerAddress: number;
  /** The last slots of `limit`, kept for the members' addresses once they are known. */
  readonly memberReserve: number;
  readonly #cells: Int32Array;
  readonly #buffer: SharedArrayBuffer;

  /** A new count (no `shared`), or a view of the one `shared` names (made by another thread). */
  constructor(
    limit: number,
    perAddress: number,
    streams: number = INT32_MAX,
    incomingBytes: number = INT32_MAX,
    incomingPerAddress: number = 0,
    shared?: SharedConnectionSlots,
  ) {
    for (const [what, value, least] of [
      ["limit", limit, 1],
      ["per-address limit", perAddress, 0],
      ["streams' limit", streams, 1],
      ["incoming bytes", incomingBytes, 1],
      ["incoming bytes per address", incomingPerAddress, 0],
    ] as const) {
      if (!Number.isInteger(value) || value < least) {
        throw new RangeError(
          `ConnectionSlots: the ${what} must be an integer ≥ ${least}, not ${value}`,
        );
      }
    }
    // Int32 cells: bounds up to 2^31 − 1 (the configuration allows 1,000,000 and 1 GiB).
    this.limit = limit;
    this.memberReserve = Math.min(MEMBER_RESERVE, Math.floor(limit / 4));
    this.perAddress = perAddress;
    this.streams = Math.min(streams, INT32_MAX);
    this.incomingBytes = Math.min(incomingBytes, INT32_MAX);
    this.incomingPerAddress = Math.min(incomingPerAddress, INT32_MAX);
    this.#buffer =
      shared?.buffer ??
      new SharedArrayBuffer((INCOMING_BUCKETS_AT + ADDRESS_BUCKETS) * Int32Array.BYTES_PER_ELEMENT);
    this.#cells = new Int32Array(this.#buffer);
  }

  /** A thread's view of the count `shared` names. */
  static of(shared: SharedConnectionSlots): ConnectionSlots {
    return new ConnectionSlots(
      shared.limit,
      shared.perAddress,
      shared.streams,
      shared.incomingBytes,
      shared.incomingPerAddress,
      shared,
    );
  }

  /** What another thread needs to share this count. */
  get shared(): SharedConnectionSlots {
    return {
      buffer: this.#buffer,
      limit: this.limit,
      perAddress: this.perAddress,
      streams: this.streams,
      incomingBytes: this.incomingBytes,
      incomingPerAddress: this.incomingPerAddress,
    };
  }

  /**
   * Takes a slot for a connection just accepted from `address` (the socket's remoteAddress):
   * null, or why it is refused (the refusal counted). A null must be matched by one
   * release(address).
   */
  take(address: string | undefined): Refusal | null {
    const cells = this.#cells;
    const open = Atomics.add(cells, OPEN, 1);
    if (
      open >= this.limit ||
      (open >= this.limit - this.memberReserve &&
        Atomics.load(cells, MEMBER_COUNT) > 0 &&
        !this.isMember(address))
    ) {
      Atomics.sub(cells, OPEN, 1);
      Atomics.add(cells, REFUSED_NODE, 1);
      return "node";
    }
    const bucket = BUCKETS_AT + addressBucket(address);
    if (Atomics.add(cells, bucket, 1) >= this.perAddress && this.perAddress > 0) {
      Atomics.sub(cells, bucket, 1);
      Atomics.sub(cells, OPEN, 1);
      Atomics.add(cells, REFUSED_ADDRESS, 1);
      return "address";
    }
    return null;
  }

  /**
   * Sets the members' addresses (IP addresses: what a connection's remoteAddress says), whose
   * connections may take the reserve; the first MEMBER_SLOTS distinct ones are kept. Written by
   * the one thread that follows the meta state; an accept on another thread during the write
   * may see part of the old table and part of the new.
   */
  setMembers(addresses: readonly string[]): void {
    const hashes = [...new Set(addresses.map(addressKey))].slice(0, MEMBER_SLOTS).map(fnv1a);
    const cells = this.#cells;
    Atomics.store(cells, MEMBER_COUNT, 0);
    hashes.forEach((h, i) => Atomics.store(cells, MEMBERS_AT + i, h));
    Atomics.store(cells, MEMBER_COUNT, hashes.length);
  }

  /** Whether `address` is one setMembers() named (or shares its key's hash with one). */
  isMember(address: string | undefined): boolean {
    return this.#isMemberHash(fnv1a(addressKey(address)));
  }

  /** isMember for an address key's hash `h`. */
  #isMemberHash(h: number): boolean {
    const cells = this.#cells;
    const count = Math.min(Atomics.load(cells, MEMBER_COUNT), MEMBER_SLOTS);
    for (let i = 0; i < count; i++) if (Atomics.load(cells, MEMBERS_AT + i) === h) return true;
    return false;
  }

  /**
   * Takes a slot whatever the counts: for a connection another thread took one for and handed
   * on (a shard worker's tunnel), which released its own when it closed its copy.
   */
  adopt(address: string | undefined): void {
    Atomics.add(this.#cells, OPEN, 1);
    Atomics.add(this.#cells, BUCKETS_AT + addressBucket(address), 1);
  }

  /** Gives back the slot take() or adopt() gave a connection from `address`. */
  release(address: string | undefined): void {
    Atomics.sub(this.#cells, BUCKETS_AT + addressBucket(address), 1);
    Atomics.sub(this.#cells, OPEN, 1);
  }

  /**
   * Takes a slot for a client's streaming call about to be proxied: false (and the refusal
   * counted) when `streams` are open already. A true must be matched by one releaseStream().
   */
  takeStream(): boolean {
    if (Atomics.add(this.#cells, STREAMS, 1) < this.streams) return true;
    Atomics.sub(this.#cells, STREAMS, 1);
    Atomics.add(this.#cells, REFUSED_STREAMS, 1);
    return false;
  }

  releaseStream(): void {
    Atomics.sub(this.#cells, STREAMS, 1);
  }

  /** Clients' streaming calls open now, across the node. */
  get openStreams(): number {
    return Atomics.load(this.#cells, STREAMS);
  }

  /** Clients' streaming calls refused since the node started. */
  get refusedStreams(): number {
    return Atomics.load(this.#cells, REFUSED_STREAMS);
  }

  /** Whose bytes a request from `address` brings (for takeIncoming: once a request). */
  incomingSource(address: string | undefined): IncomingSource {
    const h = fnv1a(addressKey(address));
    return { bucket: INCOMING_BUCKETS_AT + bucketOf(h), member: this.#isMemberHash(h) };
  }

  /**
   * The last quarter of `incomingBytes` (less when that would leave a client less than
   * `incomingPerAddress`), kept for the members' addresses once they are known (none on a
   * single node).
   */
  get incomingMemberReserve(): number {
    if (Atomics.load(this.#cells, MEMBER_COUNT) === 0) return 0;
    const quarter = Math.floor(this.incomingBytes / 4);
    return Math.max(0, Math.min(quarter, this.incomingBytes - this.incomingPerAddress));
  }

  /**
   * Counts `bytes` more of a request still arriving from `from` (incomingSource; none: counted
   * for the node alone): null, or why not (nothing counted, the refusal counted) — it would take
   * the node past `incomingBytes` (a client past all but the members' reserve), or the client's
   * address past `incomingPerAddress`. Every byte counted must be given back with
   * releaseIncoming(bytes, from) once its request is whole or gone.
   */
  takeIncoming(bytes: number, from?: IncomingSource): Refusal | null {
    const cells = this.#cells;
    const member = from?.member ?? false;
    const bound = member ? this.incomingBytes : this.incomingBytes - this.incomingMemberReserve;
    // Compared after adding: the sum never wraps an Int32 (bytes ≤ a chunk, bound ≤ 2 GiB − 1).
    if (Atomics.add(cells, INCOMING, bytes) + bytes > bound) {
      Atomics.sub(cells, INCOMING, bytes);
      Atomics.add(cells, REFUSED_INCOMING, 1);
      return "node";
    }
    if (from === undefined || member || this.incomingPerAddress === 0) return null;
    if (Atomics.add(cells, from.bucket, bytes) + bytes > this.incomingPerAddress) {
      Atomics.sub(cells, from.bucket, bytes);
      Atomics.sub(cells, INCOMING, bytes);
      Atomics.add(cells, REFUSED_INCOMING, 1);
      return "address";
    }
    return null;
  }

  /** Gives back `bytes` takeIncoming(bytes, from) counted. */
  releaseIncoming(bytes: number, from?: IncomingSource): void {
    if (bytes <= 0) return;
    Atomics.sub(this.#cells, INCOMING, bytes);
    if (from !== undefined && !from.member && this.incomingPerAddress > 0) {
      Atomics.sub(this.#cells, from.bucket, bytes);
    }
  }

  /** Bytes of requests still arriving from `address` (and any address that shares its bucket). */
  incomingFrom(address: string | undefined): number {
    return Atomics.load(this.#cells, INCOMING_BUCKETS_AT + addressBucket(address));
  }

  /**
   * The most bytes of header blocks still arriving (a block waiting for its last CONTINUATION,
   * up to 144 KiB a connection) the node holds: a quarter of `incomingBytes`, apart from it. A
   * gRPC client sends a block's frames together, so a block waits only while they arrive; one
   * that stalls is a client's choice, and the 10,000 connections a node allows, each stalled in
   * one, could hold 1.4 GiB unbounded. Apart, so that a budget full of requests' bytes never
   * ends the connection of a client whose metadata takes more than one frame.
   */
  get partialHeaderBytes(): number {
    return Math.floor(this.incomingBytes / 4);
  }

  /** Counts `bytes` more of a header block still arriving: false (nothing counted) past the bound. */
  takePartialHeaders(bytes: number): boolean {
    const cells = this.#cells;
    if (Atomics.add(cells, PARTIAL_HEADERS, bytes) + bytes <= this.partialHeaderBytes) return true;
    Atomics.sub(cells, PARTIAL_HEADERS, bytes);
    return false;
  }

  releasePartialHeaders(bytes: number): void {
    if (bytes > 0) Atomics.sub(this.#cells, PARTIAL_HEADERS, bytes);
  }

  /** Bytes of header blocks still arriving now, across the node. */
  get partialHeaders(): number {
    return Atomics.load(this.#cells, PARTIAL_HEADERS);
  }

  /** Bytes of requests still arriving now, across the node. */
  get incoming(): number {
    return Atomics.load(this.#cells, INCOMING);
  }

  /** Requests refused since start for want of room to receive them. */
  get refusedIncoming(): number {
    return Atomics.load(this.#cells, REFUSED_INCOMING);
  }

  /** Counts a request cut for not arriving whole in time (`rpc.request_receive_timeout_ms`). */
  countTooSlow(): void {
    Atomics.add(this.#cells, TOO_SLOW, 1);
  }

  /** Requests cut since start for not arriving whole in time. */
  get tooSlow(): number {
    return Atomics.load(this.#cells, TOO_SLOW);
  }

  /** Connections open now, across the node. */
  get open(): number {
    return Atomics.load(this.#cells, OPEN);
  }

  /** Connections open now from `address` (and any address that shares its bucket). */
  openFrom(address: string | undefined): number {
    return Atomics.load(this.#cells, BUCKETS_AT + addressBucket(address));
  }

  /** Connections refused since the node started, for the node's bound and for an address's. */
  get refused(): { readonly node: number; readonly address: number } {
    return {
      node: Atomics.load(this.#cells, REFUSED_NODE),
      address: Atomics.load(this.#cells, REFUSED_ADDRESS),
    };
  }
}

/**
 * What an address is bounded as: an IPv4 address (also written IPv4-mapped, `::ffff:a.b.c.d`)
 * as itself, an IPv6 address by its first 64 bits (a host is usually given a whole /64).
 */
export function addressKey(address: string | undefined): string {
  if (address === undefined || address === "") return "";
  const lower = address.toLowerCase();
  if (lower.startsWith("::ffff:") && lower.includes(".")) return lower.slice(7);
  if (!lower.includes(":")) return lower;
  const zone = lower.indexOf("%");
  const bare = zone === -1 ? lower : lower.slice(0, zone);
  const [head = "", tail] = bare.split("::", 2);
  const front = head === "" ? [] : head.split(":");
  const back = tail === undefined || tail === "" ? [] : tail.split(":");
  const groups =
    tail === undefined
      ? front
      : [
          ...front,
          ...Array<string>(Math.max(0, 8 - front.length - back.length)).fill("0"),
          ...back,
        ];
  return groups
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, ""))
    .join(":");
}

/** FNV-1a over `key`, as an Int32 cell holds it. */
function fnv1a(key: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h | 0;
}

/** The bucket of `address` (FNV-1a over its key). */
function addressBucket(address: string | undefined): number {
  return bucketOf(fnv1a(addressKey(address)));
}

/** The bucket of an address key's hash. */
function bucketOf(h: number): number {
  return h & (ADDRESS_BUCKETS - 1);
}
