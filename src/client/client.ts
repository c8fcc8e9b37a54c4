/**
 * CairnClient: the TypeScript client of the cairn.v1 API.
 *
 * Routing is the cluster's even on one node: the client follows `Meta.WatchCluster`, computes a
 * key's shard with `shardForKey` (xxhash64 seed 0 + jump hash, design.md §2) and sends the call to
 * that shard's leader; without a view, or when the leader is unknown or unreachable, it sends to
 * another node, which forwards: a member the view shows serving, else a configured endpoint
 * (fallback.ts). Within a call, a node that failed to connect is not tried again while another
 * remains, nor followed when a hint names it.
 *
 * Every call has a deadline (per call `timeoutMs`, default from the options); retries happen inside
 * it, with exponential backoff and full jitter, and only when retrying cannot apply a write twice:
 * reads retry on UNAVAILABLE, CANCELLED and Cairn's RESOURCE_EXHAUSTED (not gRPC's own, a size
 * limit: see `isLimitExceeded`); writes retry only when the failure proves the write was not
 * applied (see `isProvablyNotApplied`). A write that timed out or lost its connection after being
 * sent is reported as `IndeterminateWriteError` and never retried.
 */
import {
  ChannelCredentials,
  type Client,
  type ClientUnaryCall,
  connectivityState,
  InterceptingCall,
  type Interceptor,
  Metadata,
  type ServiceError,
  status,
  type StatusObject,
} from "@grpc/grpc-js";
// proto.ts, not the api index: the index pulls in the whole server, which would triple the
// start-up time of every `cairn` client command.
import { loadCairnProto } from "../api/proto.ts";
// Not through common/index.ts, which loads the native addon: the client needs none.
import { grpcJsDeadline } from "../common/deadline-clock.ts";
import {
  CONNECT_FAILURE_DETAILS,
  CURRENT_VERSION_KEY,
  ERROR_CODE_KEY,
  LEADER_HINT_KEY,
  LEFT_CLUSTER_KEY,
  SERVED_BY_KEY,
} from "../api/wire.ts";
import type { AdminClient } from "../api/generated/cairn/v1/Admin.ts";
import type { ClusterView__Output } from "../api/generated/cairn/v1/ClusterView.ts";
import type { KVClient } from "../api/generated/cairn/v1/KV.ts";
import type { MetaClient } from "../api/generated/cairn/v1/Meta.ts";
import type { DeleteResponse__Output } from "../api/generated/cairn/v1/DeleteResponse.ts";
import type { GetResponse__Output } from "../api/generated/cairn/v1/GetResponse.ts";
import type { PutResponse__Output } from "../api/generated/cairn/v1/PutResponse.ts";
import type { ScanResponse__Output } from "../api/generated/cairn/v1/ScanResponse.ts";
import type { SnapshotShardResponse__Output } from "../api/generated/cairn/v1/SnapshotShardResponse.ts";
import type { TransferLeaderResponse__Output } from "../api/generated/cairn/v1/TransferLeaderResponse.ts";
import type { NodeStatus__Output } from "../api/generated/cairn/v1/NodeStatus.ts";
import type { Version__Output } from "../api/generated/cairn/v1/Version.ts";
import { shardForKey } from "../cluster/index.ts";
import { isLoopbackHost, parseHostPort } from "../config/address.ts";
import { pickFallback, servingMembers } from "./fallback.ts";
import {
  ClientClosedError,
  DeadlineExceededError,
  IndeterminateWriteError,
  InvalidRequestError,
  metadataString,
  parseVersion,
  ServerError,
  UnavailableError,
  VersionConflictError,
} from "./errors.ts";
import {
  type Bytes,
  type ClusterView,
  type Consistency,
  type DeleteResult,
  type GetResult,
  type KeyValue,
  type NodeStanding,
  type ScanResult,
  type SnapshotResult,
  toBytes,
  utf8,
  type Version,
} from "./types.ts";

export interface CairnClientOptions {
  /** host:port of one or more nodes. */
  readonly endpoints: readonly string[];
  /** Default deadline of a call, retries included. Default 5000 ms. */
  readonly timeoutMs?: number;
  /**
   * How long one attempt waits for a connection to its node (TCP, TLS, HTTP/2 settings) before
   * it counts as never sent and the next endpoint is tried: a node that accepts and never
   * answers, or a black-holed address, would otherwise hold the call until its deadline. The
   * connection goes on being set up meanwhile. Applies when shorter than the call's time left.
   * Default 1000 ms.
   */
  readonly connectTimeoutMs?: number;
  /** Most attempts of one call; the deadline bounds them anyway. Default unlimited. */
  readonly maxAttempts?: number;
  /** First backoff; doubles each retry up to `maxBackoffMs`, with full jitter. Default 20 ms. */
  readonly initialBackoffMs?: number;
  /** Default 1000 ms. */
  readonly maxBackoffMs?: number;
  /** Follow WatchCluster to send each key to its shard's leader. Default true. */
  readonly routing?: boolean;
  /**
   * Extra grpc-js channel options. `{"grpc.use_local_subchannel_pool": 1}` gives this client its
   * own connections instead of sharing them with other clients of the same address.
   */
  readonly channelOptions?: Readonly<Record<string, string | number>>;
  /** Injected randomness for jitter (tests); default Math.random. */
  readonly random?: () => number;
  /**
   * TLS to the nodes (a node with `tls.cert_file`); absent: cleartext. `ca`: the certificates
   * (PEM) that signed the nodes' (default: the system's roots); `cert` and `key`: this client's
   * certificate and key (PEM), for a node with `tls.client_ca_file` (mutual TLS). The node's
   * certificate must name the host of the endpoint dialled (`cairn cert create-node --host`).
   * grpc-js sends that host as the TLS server name, an IP address too (the endpoints given, and
   * the members' addresses followed for routing), which Node warns about once per process
   * (DEP0123; harmless, the certificate's IP names are checked all the same). The `cairn` CLI
   * hides that warning; a program that minds it can name the nodes by a name their certificate
   * carries (`channelOptions: {"grpc.ssl_target_name_override": NAME}`).
   */
  readonly tls?: TlsOptions;
  /**
   * A bearer token of the nodes' `auth.tokens_file`, sent on every call as `authorization:
   * Bearer TOKEN`. Without `tls` it goes to loopback addresses only (the nodes accept it in
   * cleartext on loopback only): an endpoint elsewhere is refused here (TypeError), and routing
   * does not follow a member's address elsewhere, so the token never crosses a network unsealed.
   */
  readonly token?: string;
}

export interface TlsOptions {
  readonly ca?: Buffer;
  readonly cert?: Buffer;
  readonly key?: Buffer;
}

export interface CallOptions {
  readonly timeoutMs?: number;
  readonly signal?: AbortSignal;
}

export interface PutOptions extends CallOptions {
  /** Compare-and-set: apply only if the key's current version is this one. */
  readonly expectedVersion?: Version;
}

export interface GetOptions extends CallOptions {
  readonly consistency?: Consistency;
}

export type DeleteOptions = PutOptions;

export type ScanRange =
  | { readonly prefix: Bytes }
  | { readonly start?: Bytes; readonly end?: Bytes }
  | Record<string, never>;

export interface ScanOptions extends GetOptions {
  /** Most items returned in total, a whole number; 0 or absent = all. */
  readonly limit?: number;
  /** Items asked of the server per page, 1 to 10,000. Default 1000. */
  readonly pageSize?: number;
  /**
   * With `consistency: "serializable"` only: a shard none of whose replicas answers is left out
   * (named in the result's `skippedShards`) instead of failing the scan. For reading what
   * survives when a shard's replicas are lost for good.
   */
  readonly skipUnavailableShards?: boolean;
}

interface Connection {
  readonly address: string;
  readonly kv: KVClient;
  readonly meta: MetaClient;
  readonly admin: AdminClient;
  /**
   * The attempts and watches using it now. A connection that neither the view nor the
   * endpoints name is closed once none is (`#maybeClose`): closed under a call still waiting for
   * its connection, it would fail the call ("Channel closed before call started") as if sent.
   */
  uses: number;
}

type Kind = "read" | "write";

/** Starts a call's attempt on a connection: a gRPC call with `deadline`, answering `cb`. */
type Invoke<T> = (
  c: Connection,
  deadline: number,
  cb: (err: ServiceError | null, res?: T) => void,
) => unknown;

/** How an attempt ended: its answer, or its gRPC failure and how long it took once sent. */
type Attempt<T> =
  | { readonly ok: true; readonly answer: T }
  | { readonly ok: false; readonly failure: ServiceError; readonly took: number };

const { proto } = loadCairnProto();
const v1 = proto.cairn.v1;
const EMPTY = new Uint8Array(0);
/** The most items a node gives a scan page (its Scan's `limit` is at most this). */
const MAX_PAGE_SIZE = 10_000;
const CHANNEL_OPTIONS = {
  "grpc.initial_reconnect_backoff_ms": 100,
  "grpc.max_reconnect_backoff_ms": 1000,
  "grpc.keepalive_time_ms": 30_000,
  // The most a node may be configured to send (limits.max_message_bytes at its maximum): the
  // node bounds its answers, and a value it took must come back (grpc-js's default is 4 MiB).
  "grpc.max_receive_message_length": 256 * 1024 * 1024,
};

/** A view's known leaders by shard, and its first-ranked node for a shard with none known. */
interface ViewLeaders {
  readonly leaders: Map<number, string>;
  readonly preferred: Map<number, string>;
}

export class CairnClient {
  readonly #endpoints: readonly string[];
  readonly #timeoutMs: number;
  readonly #connectTimeoutMs: number;
  readonly #maxAttempts: number;
  readonly #initialBackoffMs: number;
  readonly #maxBackoffMs: number;
  readonly #random: () => number;
  readonly #channelOptions: Record<string, string | number>;
  readonly #credentials: ChannelCredentials;
  readonly #tls: boolean;
  /** Adds the bearer token to every call; null without one. */
  readonly #interceptors: Interceptor[] | null;
  /** A token with no TLS: sent to loopback addresses only. */
  readonly #cleartextToken: boolean;
  readonly #connections = new Map<string, Connection>();
  #next = 0;
  #closed = false;
  #view: ClusterView | null = null;
  /**
   * Leaders learnt from answers, by shard: the `cairn-served-by` trailer of a write or a
   * linearizable read names the node that served it, its shard's leader. A node's view knows
   * the leaders of the shards it holds a replica of, all of them with three nodes but about 3/n
   * in a larger cluster: without this, a call for the others would often reach a node that
   * forwards it. It comes before the view's leader: a view names the leader of a shard it holds
   * no replica of as it was when a move took its replica off, and keeps naming it after the
   * leadership moved on (every call then went through a node that forwarded it); a leader that
   * moves on answers, or forwards, and the trailer tells the new one. At most one entry a
   * shard; an entry goes when a call it routed fails.
   */
  readonly #learnt = new Map<number, string>();
  /**
   * The routed view's leaders by shard id, and for a shard whose leader the view does not know,
   * its first-ranked node (its preferred leader, which leads it most of the time; a replica
   * that does not forwards to the one that does). Built once per view: it lists them in an array.
   */
  #leadersOfView: ({ view: ClusterView } & ViewLeaders) | null = null;
  #routingWatch: { cancel(): void } | null = null;
  #routingRetry: NodeJS.Timeout | null = null;
  /**
   * The WatchCluster streams open now (the routing watch's and the caller's own), cancelled by
   * `close`: grpc-js lets a call run on after its channel closes, so a watch left open outlived
   * its client, its caller waiting for a view for good and its connection keeping the process
   * alive.
   */
  readonly #watches = new Set<{ cancel(): void }>();
  /**
   * Aborted by `close`: it ends the waits between a call's attempts, whose timers kept the call
   * (and the process) alive until they ran out.
   */
  readonly #closing = new AbortController();

  constructor(options: CairnClientOptions) {
    if (options.endpoints.length === 0) throw new TypeError("CairnClient: endpoints is empty");
    this.#endpoints = [...options.endpoints];
    // A NaN duration makes every comparison with it false: a call with a NaN deadline retried
    // without end, and an attempt with a NaN connect budget waited for its connection for good.
    const positive = (n: number): boolean => n > 0 && Number.isFinite(n);
    const whole = (n: number): boolean => n >= 0 && Number.isFinite(n);
    this.#timeoutMs = checkedOption("timeoutMs", options.timeoutMs ?? 5000, positive);
    this.#connectTimeoutMs = checkedOption(
      "connectTimeoutMs",
      options.connectTimeoutMs ?? 1000,
      positive,
    );
    this.#maxAttempts = checkedOption(
      "maxAttempts",
      options.maxAttempts ?? Number.POSITIVE_INFINITY,
      (n) => n === Number.POSITIVE_INFINITY || (Number.isSafeInteger(n) && n >= 1),
    );
    this.#initialBackoffMs = checkedOption(
      "initialBackoffMs",
      options.initialBackoffMs ?? 20,
      whole,
    );
    this.#maxBackoffMs = checkedOption("maxBackoffMs", options.maxBackoffMs ?? 1000, whole);
    this.#random = options.random ?? Math.random;
    this.#channelOptions = { ...CHANNEL_OPTIONS, ...options.channelOptions };
    this.#credentials = credentialsOf(options.tls);
    this.#interceptors = options.token === undefined ? null : [bearer(options.token)];
    this.#tls = options.tls !== undefined;
    this.#cleartextToken = options.token !== undefined && options.tls === undefined;
    for (const e of this.#endpoints) this.#checkTokenSafe(e);
    if (options.routing ?? true) this.#startRouting(0);
  }

  /** The latest cluster view the client routes with, or null before the first one. */
  get view(): ClusterView | null {
    return this.#view;
  }

  /** Stores `value` under `key`; returns the write's version. */
  async put(key: Bytes, value: Bytes, options: PutOptions = {}): Promise<Version> {
    const k = toBytes(key);
    const req = {
      key: k,
      value: toBytes(value),
      ...(options.expectedVersion === undefined
        ? {}
        : { expected_version: checkedVersion(options.expectedVersion) }),
    };
    const res = await this.#call<PutResponse__Output>("write", k, options, (c, deadline, cb) =>
      c.kv.Put(req, { deadline }, cb),
    );
    return version(res.version);
  }

  /** Reads `key`; null when it does not exist. */
  async get(key: Bytes, options: GetOptions = {}): Promise<GetResult | null> {
    const k = toBytes(key);
    const req = { key: k, consistency: consistencyOf(options.consistency) };
    const res = await this.#call<GetResponse__Output>(
      "read",
      k,
      options,
      (c, deadline, cb) => c.kv.Get(req, { deadline }, cb),
      // A serializable read may be served by any replica: its answer says nothing of the leader.
      { servedByLeader: req.consistency === "LINEARIZABLE" },
    );
    if (!res.found) return null;
    const value = new Uint8Array(res.value);
    return { key: k, value, version: version(res.version), text: () => utf8(value) };
  }

  /** Convenience: the value as UTF-8, or null. */
  async getString(key: Bytes, options: GetOptions = {}): Promise<string | null> {
    return (await this.get(key, options))?.text() ?? null;
  }

  /** Deletes `key`; `deleted` is false when it did not exist. */
  async delete(key: Bytes, options: DeleteOptions = {}): Promise<DeleteResult> {
    const k = toBytes(key);
    const req = {
      key: k,
      ...(options.expectedVersion === undefined
        ? {}
        : { expected_version: checkedVersion(options.expectedVersion) }),
    };
    const res = await this.#call<DeleteResponse__Output>("write", k, options, (c, deadline, cb) =>
      c.kv.Delete(req, { deadline }, cb),
    );
    return { deleted: res.deleted, version: version(res.version) };
  }

  /**
   * Items of a range in key order: `{prefix}`, `{start, end}` (end exclusive; either may be
   * omitted) or `{}` for every key. Pages through the server's results up to `limit`; the whole
   * scan shares one deadline.
   */
  async scan(range: ScanRange = {}, options: ScanOptions = {}): Promise<ScanResult> {
    const until = performance.now() + (options.timeoutMs ?? this.#timeoutMs);
    const items: KeyValue[] = [];
    const skipped = new Set<number>();
    let more = false;
    for await (const page of this.#pages(range, options, () => until - performance.now())) {
      for (const it of page.items) items.push(it);
      for (const id of page.skippedShards) skipped.add(id);
      more = page.more;
    }
    return { items, more, skippedShards: [...skipped].sort((a, b) => a - b) };
  }

  /**
   * The items of a range (as `scan`) a page at a time, for a range too large to hold at once
   * (`cairn scan` and `cairn backup` read through it). Each page is a call of its own, with its
   * own deadline (`timeoutMs`) and retries; `pageSize` items a page (default 1000), at most
   * `limit` in all when given. A page's `more` says whether keys follow it (on the last page:
   * beyond `limit`). Pages are separate reads, as `scan`'s are.
   */
  scanPages(range: ScanRange = {}, options: ScanOptions = {}): AsyncGenerator<ScanResult> {
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    return this.#pages(range, options, () => timeoutMs);
  }

  /** The pages of a scan; `timeoutMs` gives each page's time left (at least 1 ms is asked). */
  async *#pages(
    range: ScanRange,
    options: ScanOptions,
    timeoutMs: () => number,
  ): AsyncGenerator<ScanResult> {
    checkedTimeout(options.timeoutMs ?? this.#timeoutMs);
    const limit = options.limit ?? 0;
    const pageSize = options.pageSize ?? 1000;
    // Checked before anything is sent: protobufjs writes a uint32 from any number, truncated,
    // so a limit of 1.5 asked for 1 key and then for 0.5, sent as 0 (the server's default
    // page), and a page size of -1 went out as 4,294,967,295; a negative or NaN limit read
    // every key, as no limit does.
    if (!Number.isSafeInteger(limit) || limit < 0)
      throw new InvalidRequestError(
        `limit ${limit}: a scan's limit is a whole number of items, 0 for all of them`,
      );
    if (!Number.isSafeInteger(pageSize) || pageSize < 1 || pageSize > MAX_PAGE_SIZE)
      throw new InvalidRequestError(
        `pageSize ${pageSize}: a page holds a whole number of items, from 1 to ${MAX_PAGE_SIZE}`,
      );
    const base = {
      start: "start" in range && range.start !== undefined ? toBytes(range.start) : EMPTY,
      end: "end" in range && range.end !== undefined ? toBytes(range.end) : EMPTY,
      prefix: "prefix" in range ? toBytes(range.prefix) : EMPTY,
      consistency: consistencyOf(options.consistency),
      skip_unavailable_shards: options.skipUnavailableShards === true,
    };
    let pageToken: Uint8Array = EMPTY;
    let got = 0;
    /** The last key given: every key of a later page must be above it. */
    let after: Uint8Array | null = null;
    for (;;) {
      const req = {
        ...base,
        limit: limit > 0 ? Math.min(pageSize, limit - got) : pageSize,
        page_token: pageToken,
      };
      const res = await this.#call<ScanResponse__Output>(
        "read",
        null,
        { timeoutMs: Math.max(1, timeoutMs()), ...signalOf(options) },
        (c, d, cb) => c.kv.Scan(req, { deadline: d }, cb),
      );
      // A scan never passes its limit: of a page holding more items than were left to give (a
      // server that ignored the page's limit), those beyond it are left out (keys follow them:
      // `more`). A page larger than asked for but inside the limit is taken whole: leaving its
      // tail out would lose keys, as the next page starts after them.
      const kept = limit > 0 ? Math.min(res.items.length, limit - got) : res.items.length;
      const cut = kept < res.items.length;
      const items = res.items.slice(0, kept).map((it) => ({
        key: new Uint8Array(it.key),
        value: new Uint8Array(it.value),
        version: version(it.version),
      }));
      // Pages move on: keys ascending, each above the page before's, and a page followed by
      // another holds at least one. A server's page that does not would be asked for again and
      // again (each page a call of its own, scanPages with no overall deadline): a hang.
      for (const it of items) {
        if (after !== null && Buffer.compare(it.key, after) <= 0)
          throw new ServerError(
            "CAIRN_ERR_INTERNAL",
            "the server's scan page does not move on: a key not above the one before it",
            status.INTERNAL,
          );
        after = it.key;
      }
      got += items.length;
      const more = res.next_page_token.length > 0 || cut;
      if (more && items.length === 0)
        throw new ServerError(
          "CAIRN_ERR_INTERNAL",
          "the server's scan page holds no key but names a next page",
          status.INTERNAL,
        );
      yield { items, more, skippedShards: res.skipped_shards };
      if (!more || (limit > 0 && got >= limit)) return;
      pageToken = new Uint8Array(res.next_page_token);
    }
  }

  /** Takes a snapshot of a shard on the node at `endpoint` (default: the first endpoint). */
  async snapshotShard(
    shardId: number,
    options: CallOptions & { endpoint?: string } = {},
  ): Promise<SnapshotResult> {
    const req = { shard_id: shardId };
    const res = await this.#call<SnapshotShardResponse__Output>(
      "write",
      null,
      options,
      (c, deadline, cb) => c.admin.SnapshotShard(req, { deadline }, cb),
      // That node's replica: no other endpoint answers for it.
      { endpoint: options.endpoint ?? (this.#endpoints[0] as string), only: true },
    );
    return { shardId: res.shard_id, index: res.index, term: res.term, sizeBytes: res.size_bytes };
  }

  /**
   * Moves shard `shardId`'s leadership to node `nodeId`, one of its replicas (Admin
   * TransferLeader). In a cluster the node is recorded as the shard's preferred leader, so it
   * stays there; resolves with the leader's node once it leads. Asked of `endpoint`, or else of
   * the shard's leader as the client's cluster view knows it (a node holding no replica of the
   * shard refuses, naming those that do).
   */
  async transferLeader(
    shardId: number,
    nodeId: string,
    options: CallOptions & { endpoint?: string } = {},
  ): Promise<string> {
    const req = { shard_id: shardId, node_id: nodeId };
    const res = await this.#call<TransferLeaderResponse__Output>(
      "write",
      null,
      options,
      (c, deadline, cb) => c.admin.TransferLeader(req, { deadline }, cb),
      // Without an endpoint, to the shard's leader: a node holding no replica of it refuses.
      options.endpoint === undefined ? { shard: shardId } : { endpoint: options.endpoint },
    );
    return res.leader;
  }

  /**
   * Starts moving every replica and leadership off member `nodeId` (Admin DecommissionNode);
   * the cluster marks it decommissioned once none is left. Resolves with its standing now.
   */
  decommissionNode(
    nodeId: string,
    options: CallOptions & { endpoint?: string } = {},
  ): Promise<NodeStanding> {
    return this.#memberCall("DecommissionNode", nodeId, options);
  }

  /** Retires a dead or decommissioned member for good (Admin RemoveNode). */
  removeNode(
    nodeId: string,
    options: CallOptions & { endpoint?: string } = {},
  ): Promise<NodeStanding> {
    return this.#memberCall("RemoveNode", nodeId, options);
  }

  /**
   * Cancels member `nodeId`'s decommission under way (Admin RecommissionNode): it is active
   * again, and the cluster evens replicas back onto it. Refused once it is decommissioned.
   */
  recommissionNode(
    nodeId: string,
    options: CallOptions & { endpoint?: string } = {},
  ): Promise<NodeStanding> {
    return this.#memberCall("RecommissionNode", nodeId, options);
  }

  /** Member `nodeId`'s standing (Admin GetNode): its state and the replicas placed on it. */
  getNode(
    nodeId: string,
    options: CallOptions & { endpoint?: string } = {},
  ): Promise<NodeStanding> {
    return this.#memberCall("GetNode", nodeId, options);
  }

  async #memberCall(
    method: "DecommissionNode" | "RemoveNode" | "RecommissionNode" | "GetNode",
    nodeId: string,
    options: CallOptions & { endpoint?: string },
  ): Promise<NodeStanding> {
    const res = await this.#call<NodeStatus__Output>(
      method === "GetNode" ? "read" : "write",
      null,
      options,
      (c, deadline, cb) => c.admin[method]({ node_id: nodeId }, { deadline }, cb),
      options.endpoint === undefined ? {} : { endpoint: options.endpoint },
    );
    return { nodeId: res.node_id, state: res.state, replicas: res.replicas };
  }

  /**
   * The cluster view from one node (`endpoint`, else as a call falls back: a member the client's
   * view shows serving, else a configured endpoint): the full view first, then one per change.
   * The stream ends when the loop breaks, `signal` aborts, or the client closes; a broken
   * connection, a node that ends the stream (it is stopping), or no connection within
   * `connectTimeoutMs`, throws UnavailableError (callers that want to follow forever reconnect).
   */
  async *watchCluster(
    options: { signal?: AbortSignal; endpoint?: string } = {},
  ): AsyncGenerator<ClusterView> {
    this.#assertOpen();
    const address = options.endpoint ?? this.#pickFallback(new Set());
    const conn = this.#acquire(address);
    try {
      // A node that accepts and never answers would hold the stream unopened for good, and the
      // client's routing with it: it gets the connect budget, then the stream fails as a broken
      // one does (the routing watch reconnects, to the next node).
      const connected = await connectedWithin(
        conn.kv.getChannel(),
        this.#connectTimeoutMs,
        options.signal,
      ).catch(() => null);
      if (connected === null || this.#closed) return;
      if (!connected)
        throw toClientError(neverConnected(address, this.#connectTimeoutMs), "read", this.#tls);
      yield* this.#streamViews(conn, options.signal);
    } finally {
      this.#release(conn);
    }
  }

  async *#streamViews(
    conn: Connection,
    signal: AbortSignal | undefined,
  ): AsyncGenerator<ClusterView> {
    const call = conn.meta.WatchCluster({});
    const abort = (): void => call.cancel();
    signal?.addEventListener("abort", abort, { once: true });
    this.#watches.add(call);
    try {
      for await (const v of call as AsyncIterable<ClusterView__Output>) yield fromView(v);
      // The node ended the stream (a node stopping ends its watches): that ended the caller's
      // loop as if it had broken it, and a caller following the cluster stopped following. It
      // fails as a broken stream does, so the caller reconnects.
      if (!this.#closed && signal?.aborted !== true)
        throw new UnavailableError(
          `${conn.address} ended the cluster watch (the node is stopping)`,
        );
    } catch (err) {
      if (err instanceof UnavailableError) throw err;
      const e = err as ServiceError;
      if (e.code === status.CANCELLED) return;
      throw toClientError(e, "read", this.#tls);
    } finally {
      signal?.removeEventListener("abort", abort);
      this.#watches.delete(call);
      call.cancel();
    }
  }

  /**
   * Stops following the cluster, ends every `watchCluster` stream still read, and closes every
   * connection; pending calls fail.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#closing.abort();
    this.#routingWatch?.cancel();
    if (this.#routingRetry !== null) clearTimeout(this.#routingRetry);
    // Each ends as a cancelled watch does: its loop finishes.
    for (const w of [...this.#watches]) w.cancel();
    for (const c of this.#connections.values()) c.kv.close();
    this.#connections.clear();
  }

  #assertOpen(): void {
    if (this.#closed) throw new ClientClosedError();
  }

  /**
   * The node a call that is not routed goes to, in turn: a member the view shows serving, else
   * a configured endpoint; one that failed to connect earlier in the call (`failed`), or whose
   * channel is in reconnect backoff, only when no other is left (fallback.ts).
   */
  #pickFallback(failed: ReadonlySet<string>): string {
    const members = servingMembers(this.#view, (a) => this.#mayCarryToken(a));
    const picked = pickFallback(
      { members, endpoints: this.#endpoints, failed, isFailing: (a) => this.#isFailing(a) },
      this.#next,
    );
    this.#next++;
    return picked;
  }

  /** Whether a member the view shows serving, or an endpoint, is not in `excluded`. */
  #knowsOtherThan(excluded: ReadonlySet<string>): boolean {
    const members = servingMembers(this.#view, (a) => this.#mayCarryToken(a));
    return [...members, ...this.#endpoints].some((a) => !excluded.has(a));
  }

  /** Whether the channel to `address` is in reconnect backoff: a call on it fails at once. */
  #isFailing(address: string): boolean {
    const channel = this.#connections.get(address)?.kv.getChannel();
    return channel?.getConnectivityState(false) === connectivityState.TRANSIENT_FAILURE;
  }

  /** Whether this client's token (if any) may be sent to `address`. */
  #mayCarryToken(address: string): boolean {
    return !this.#cleartextToken || isLoopbackTarget(address);
  }

  /** Refuses an address a cleartext token must not be sent to. */
  #checkTokenSafe(address: string): void {
    if (!this.#mayCarryToken(address))
      throw new TypeError(
        `CairnClient: the token would cross the network in cleartext to ${address}: give tls, or use loopback endpoints`,
      );
  }

  #connection(address: string): Connection {
    let c = this.#connections.get(address);
    if (c === undefined) {
      this.#checkTokenSafe(address);
      // Reconnect quickly after a node restarts: grpc-js's default backoff grows to 120 s.
      const interceptors = this.#interceptors === null ? {} : { interceptors: this.#interceptors };
      const kv = new v1.KV(address, this.#credentials, {
        ...this.#channelOptions,
        ...interceptors,
      });
      // One channel per address, shared by the three services.
      const shared = { channelOverride: (kv as Client).getChannel(), ...interceptors };
      c = {
        address,
        kv,
        meta: new v1.Meta(address, this.#credentials, shared),
        admin: new v1.Admin(address, this.#credentials, shared),
        uses: 0,
      };
      this.#connections.set(address, c);
    }
    return c;
  }

  /** The connection to `address`, held until `#release`: it is not closed meanwhile. */
  #acquire(address: string): Connection {
    const c = this.#connection(address);
    c.uses++;
    return c;
  }

  #release(c: Connection): void {
    c.uses--;
    this.#maybeClose(c);
  }

  /**
   * Closes `c` when nothing uses it and neither the view nor the endpoints name its address, so
   * the connections stay as many as the view's members and the endpoints (and those in use):
   * a client following a cluster whose nodes come and go does not keep a channel for each.
   */
  #maybeClose(c: Connection): void {
    if (c.uses > 0 || this.#closed || this.#endpoints.includes(c.address)) return;
    if (this.#view?.nodes.some((n) => n.rpcAddr === c.address) === true) return;
    c.kv.close();
    this.#connections.delete(c.address);
  }

  /**
   * The address of the node leading `key`'s shard (or `shardOfCall`, or the one a hint names),
   * if the view knows it and shows it alive, and neither did it fail to connect earlier in the
   * call (`failed`) nor is its channel in reconnect backoff: a call sent there would fail at
   * once, or wait out its connect budget, and the node it falls back to forwards it instead.
   */
  #leaderAddress(
    key: Uint8Array | null,
    hint: string | undefined,
    failed: ReadonlySet<string>,
    shardOfCall?: number,
  ): string | undefined {
    const view = this.#view;
    if (view === null) return undefined;
    let leader = hint;
    if (leader === undefined) {
      const shard =
        key !== null && view.totalShards > 0 ? shardForKey(key, view.totalShards) : shardOfCall;
      if (shard !== undefined) {
        const known = this.#viewLeaders(view);
        leader = this.#learnt.get(shard) ?? known.leaders.get(shard) ?? known.preferred.get(shard);
      }
    }
    if (leader === undefined || leader === "") return undefined;
    const node = view.nodes.find((n) => n.id === leader);
    if (node === undefined || node.state !== "alive") return undefined;
    const addr = node.rpcAddr;
    if (addr === "" || failed.has(addr) || this.#isFailing(addr)) return undefined;
    // A cleartext token is not sent off the host: such a call goes to another node.
    return this.#mayCarryToken(addr) ? addr : undefined;
  }

  #viewLeaders(view: ClusterView): ViewLeaders {
    if (this.#leadersOfView?.view !== view) {
      const leaders = new Map<number, string>();
      const preferred = new Map<number, string>();
      for (const s of view.shards) {
        if (s.leader !== "") leaders.set(s.id, s.leader);
        else if (s.replicas[0] !== undefined) preferred.set(s.id, s.replicas[0]);
      }
      this.#leadersOfView = { view, leaders, preferred };
    }
    return this.#leadersOfView;
  }

  /** Learns `shard`'s leader from the `cairn-served-by` trailer of `call`'s answer, if any. */
  #learnLeaderFrom(call: unknown, shard: number): void {
    (call as Partial<ClientUnaryCall>).on?.("status", (s: StatusObject) => {
      if (s.code !== status.OK) return;
      const served = metadataString(s.metadata, SERVED_BY_KEY);
      // A node id has at most 128 characters (node_id): a longer trailer names no node.
      if (served !== undefined && served !== "" && served.length <= 128)
        this.#learnt.set(shard, served);
    });
  }

  #startRouting(attempt: number): void {
    if (this.#closed) return;
    const controller = new AbortController();
    this.#routingWatch = { cancel: () => controller.abort() };
    const run = async (): Promise<void> => {
      let got = false;
      const started = performance.now();
      try {
        for await (const view of this.watchCluster({ signal: controller.signal })) {
          // A view no node can send (more shards than cluster.total_shards allows) is not
          // routed by: the leaders learnt from answers are kept a shard each, and such a view
          // let them grow with every key called.
          if (view.totalShards > MAX_TOTAL_SHARDS) continue;
          this.#view = view;
          got = true;
          for (const c of [...this.#connections.values()]) this.#maybeClose(c);
        }
      } catch {
        // Routing goes on with the last view until the watch is back (on another node: the
        // watch falls back as a call does).
      }
      if (this.#closed || controller.signal.aborted) return;
      // A watch that streamed views for a while starts over from the shortest backoff; one that
      // ended soon after its start backs off as a failed one does: a node that ends each watch
      // after its first view (a buggy or hostile one) was asked again every ~10 ms, for good.
      const next = got && performance.now() - started >= STEADY_WATCH_MS ? 0 : attempt + 1;
      this.#routingRetry = setTimeout(() => this.#startRouting(next), this.#backoff(next));
      this.#routingRetry.unref();
    };
    void run();
  }

  #backoff(attempt: number): number {
    const cap = Math.min(this.#maxBackoffMs, this.#initialBackoffMs * 2 ** attempt);
    return Math.floor(this.#random() * cap);
  }

  async #call<T>(
    kind: Kind,
    key: Uint8Array | null,
    options: CallOptions,
    invoke: Invoke<T>,
    how: {
      /** Send to this node, not routed. */
      readonly endpoint?: string;
      /** To `endpoint` only, never to another endpoint when it cannot be reached (a call about
       * that node's own replica: a snapshot). */
      readonly only?: boolean;
      /** The answer comes from `key`'s shard leader (a write or a linearizable read, the default
       * for a call with a key); a serializable read's does not. */
      readonly servedByLeader?: boolean;
      /** A call about this shard, with no key: sent to its leader as the view knows it. */
      readonly shard?: number;
    } = {},
  ): Promise<T> {
    const endpoint = how.endpoint;
    // The leader that serves this call, named in its answer's trailer, is learnt for its shard.
    const learnFor =
      key !== null &&
      how.servedByLeader !== false &&
      this.#view !== null &&
      this.#view.totalShards > 0
        ? shardForKey(key, this.#view.totalShards)
        : null;
    this.#assertOpen();
    // The call's time runs on the monotonic clock; each attempt's gRPC deadline is what is left
    // of it, on the wall clock gRPC deadlines are on (a step of it moves that attempt's only).
    const until = performance.now() + checkedTimeout(options.timeoutMs ?? this.#timeoutMs);
    let hint: string | undefined;
    let last: ServiceError | undefined;
    // Addresses that failed to connect in this call: neither routed to nor fallen back to again
    // while another node is left, so a dead one costs the call one attempt (and at most one
    // connect budget), not one per round.
    const failed = new Set<string>();
    // Addresses whose node has left its cluster for good (decommissioned, removed): it refuses
    // every call, so the call is not sent there again, and ends once no other node is left.
    const left = new Set<string>();
    // How long the last attempt took: a retry with less time left than twice that (or than
    // MIN_ATTEMPT_MS) is not started. It would likely time out, and a write that times out is
    // indeterminate, where giving up now reports it (provably) not applied.
    let lastTook = 0;
    for (let attempt = 0; attempt < this.#maxAttempts; attempt++) {
      options.signal?.throwIfAborted();
      this.#assertOpen();
      if (attempt > 0 && until - performance.now() < Math.max(MIN_ATTEMPT_MS, 2 * lastTook)) break;
      const routed = endpoint ?? this.#leaderAddress(key, hint, failed, how.shard);
      // A node named for the call that failed to connect is not tried again: the call falls
      // back to another (unless it is for that node only).
      const address =
        routed !== undefined && (how.only === true || !failed.has(routed))
          ? routed
          : this.#pickFallback(failed);
      const conn = this.#acquire(address);
      const result = await this.#attempt(conn, kind, until, options, invoke, learnFor).finally(() =>
        this.#release(conn),
      );
      if (result.ok) return result.answer;
      const e = result.failure;
      last = e;
      lastTook = result.took;
      if (!isRetryable(e, kind)) throw toClientError(e, kind, this.#tls);
      if (isConnectFailure(e)) failed.add(address);
      if (metadataString(e.metadata, LEFT_CLUSTER_KEY) === "true") {
        left.add(address);
        failed.add(address);
        // Asked until the deadline, it would refuse the same: with a single endpoint,
        // `cairn node status --endpoints <a decommissioned node>` said so after 5 s.
        if (how.only === true || !this.#knowsOtherThan(left))
          throw new UnavailableError(e.details, e.code, e);
      }
      hint = metadataString(e.metadata, LEADER_HINT_KEY);
      // What was learnt for the shard is stale: the node refused (the hint, if any, is newer)
      // or could not be reached.
      if (learnFor !== null) this.#learnt.delete(learnFor);
      const wait = this.#backoff(attempt);
      if (performance.now() + wait >= until) break;
      // Ended early by close(): the next round throws ClientClosedError.
      await sleep(wait, options.signal, this.#closing.signal);
    }
    if (last === undefined) throw new DeadlineExceededError("call timed out");
    // Out of attempts or time after retryable failures: nothing was applied (writes retry only then).
    throw new UnavailableError(
      `${last.details}${tlsHint(last.details, this.#tls)} (gave up after retries)`,
      last.code,
      last,
    );
  }

  /**
   * One attempt of a call, on `conn`, with the call's time left (to `until`). Rejects when the
   * call's signal aborts (a write sent: IndeterminateWriteError) or the client closes.
   */
  async #attempt<T>(
    conn: Connection,
    kind: Kind,
    until: number,
    options: CallOptions,
    invoke: Invoke<T>,
    learnFor: number | null,
  ): Promise<Attempt<T>> {
    // A node that accepts and never answers (or a handshake that never ends, a SYN dropped)
    // would hold the call, waiting for its connection, until the deadline: the attempt waits
    // for one for its connect budget only, then counts as never sent (nothing was) and the
    // next goes to another node. With less time left than that, grpc-js's wait is the same.
    // (A connected channel, every call's but the first's, costs one look and no await.)
    const channel = conn.kv.getChannel();
    const connected =
      channel.getConnectivityState(false) === connectivityState.READY ||
      this.#connectTimeoutMs >= until - performance.now() ||
      (await connectedWithin(channel, this.#connectTimeoutMs, options.signal));
    this.#assertOpen();
    if (!connected)
      return { ok: false, failure: neverConnected(conn.address, this.#connectTimeoutMs), took: 0 };
    // Measured from here: the retry rule is about how long a sent attempt takes.
    const started = performance.now();
    const deadline = grpcJsDeadline(until - started);
    try {
      const answer = await new Promise<T>((resolve, reject) => {
        const signal = options.signal;
        // An abort ends the attempt in flight too, not only the wait between attempts.
        const onAbort = (): void => {
          (call as Partial<ClientUnaryCall>).cancel?.();
          reject(new Aborted(signal?.reason));
        };
        const call = invoke(conn, deadline, (err, res) => {
          signal?.removeEventListener("abort", onAbort);
          if (err === null) resolve(res as T);
          else reject(err);
        });
        if (learnFor !== null) this.#learnLeaderFrom(call, learnFor);
        signal?.addEventListener("abort", onAbort, { once: true });
      });
      return { ok: true, answer };
    } catch (err) {
      if (!(err instanceof Aborted)) {
        const failure = err as ServiceError;
        // close() fails a call grpc-js still holds waiting for its connection with these words:
        // it was never sent, so a write is not indeterminate; the call ends as closed.
        if (this.#closed && failure.details === CLOSED_BEFORE_START) throw new ClientClosedError();
        return { ok: false, failure, took: performance.now() - started };
      }
      // A write sent may have been applied: its outcome is unknown.
      if (kind === "write")
        throw new IndeterminateWriteError(
          "write outcome unknown: the call was aborted after it was sent",
          err.reason,
        );
      throw err.reason as Error;
    }
  }
}

/** What a TLS client adds to a failure to connect that says the port speaks no TLS. */
function tlsHint(details: string | undefined, tls: boolean): string {
  return tls &&
    /before secure TLS connection was established|wrong version number|packet length too long/.test(
      details ?? "",
    )
    ? " — the node does not speak TLS on this port (a node without tls.cert_file serves cleartext)"
    : "";
}

/** An attempt ended by its call's AbortSignal; `reason` is the signal's. */
class Aborted {
  readonly reason: unknown;
  constructor(reason: unknown) {
    this.reason = reason;
  }
}

/** grpc-js's details for a call its channel's close() ended before it was sent. */
const CLOSED_BEFORE_START = "Channel closed before call started";

/** The most shards a cluster has (cluster.total_shards: 1 to 65,536). */
const MAX_TOTAL_SHARDS = 65_536;

/** How long a routing watch must have streamed for its next one to start without backoff. */
const STEADY_WATCH_MS = 5000;

/** The least time left for which the client starts another attempt of a call. */
const MIN_ATTEMPT_MS = 10;

const NOT_APPLIED_CODES = new Set([
  "CAIRN_ERR_NOT_LEADER",
  "CAIRN_ERR_SHUTTING_DOWN",
  "CAIRN_ERR_PROPOSAL_LOST",
  "CAIRN_ERR_PROPOSAL_DROPPED",
  "CAIRN_ERR_BACKPRESSURE",
  // A node that is not an active member refuses before the store sees the request.
  "CAIRN_ERR_NOT_MEMBER",
  // The request's shard could not be created (its first request): nothing was proposed to it.
  "CAIRN_ERR_SHARD_CREATION",
  // The node has not learnt its cluster's metadata, so it could not create the request's shard
  // (src/node/cluster.ts): nothing was proposed either.
  "CAIRN_ERR_NOT_READY",
  // The front end answered before the request arrived whole (rpc.request_receive_timeout_ms).
  "CAIRN_ERR_REQUEST_TOO_SLOW",
]);

/**
 * Whether `channel` is connected within `ms` (it is asked to connect): false when it is still
 * connecting then. A channel whose connection failed (TRANSIENT_FAILURE) counts as connected
 * here: a call on it fails at once, "No connection established", as a refused one does. Rejects
 * with `signal`'s reason on abort.
 */
async function connectedWithin(
  // The Channel interface getChannel() returns (the package exports the class by that name).
  channel: ReturnType<Client["getChannel"]>,
  ms: number,
  signal: AbortSignal | undefined,
): Promise<boolean> {
  const until = performance.now() + ms;
  for (;;) {
    signal?.throwIfAborted();
    const state = channel.getConnectivityState(true);
    if (state !== connectivityState.IDLE && state !== connectivityState.CONNECTING) return true;
    const left = until - performance.now();
    if (left <= 0) return false;
    // The watch ends at a change of state or at its deadline (on the wall clock: a step of it
    // ends it early, and the loop watches again for what is left on the monotonic clock).
    await new Promise<void>((resolve, reject) => {
      const onAbort = (): void => reject(signal?.reason as Error);
      channel.watchConnectivityState(state, grpcJsDeadline(left), () => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      });
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }
}

/** The failure of an attempt whose node gave it no connection in time: it was never sent. */
function neverConnected(address: string, ms: number): ServiceError {
  const details = `No connection established to ${address} within ${ms} ms (connectTimeoutMs)`;
  return Object.assign(new Error(`${status.UNAVAILABLE} UNAVAILABLE: ${details}`), {
    code: status.UNAVAILABLE,
    details,
    metadata: new Metadata(),
  });
}

/** grpc-js reports "never connected" with these details; the request was not sent. */
function isConnectFailure(e: ServiceError): boolean {
  return (
    e.code === status.UNAVAILABLE &&
    metadataString(e.metadata, ERROR_CODE_KEY) === undefined &&
    CONNECT_FAILURE_DETAILS.test(e.details ?? "")
  );
}

/**
 * grpc-js's DEADLINE_EXCEEDED for a call whose deadline passed before it was given a
 * connection: its details end with the stage it was held at ("…,Waiting for LB pick" while the
 * channel was still connecting: a node that accepts and never answers, a handshake that never
 * ends; "waiting for name resolution"), where a call that was sent ends with its connection's
 * "remote_addr=…". One that grpc-js retried on its own ("previous attempts: N") is left alone.
 */
function isNeverSentTimeout(e: ServiceError): boolean {
  const details = e.details ?? "";
  return (
    e.code === status.DEADLINE_EXCEEDED &&
    metadataString(e.metadata, ERROR_CODE_KEY) === undefined &&
    /^Deadline exceeded after /.test(details) &&
    /(Waiting for LB pick|waiting for name resolution|waiting for metadata filters)$/.test(
      details,
    ) &&
    !details.includes("previous attempts")
  );
}

/**
 * RESOURCE_EXHAUSTED without a Cairn code is gRPC's own: a message past a size limit (an answer
 * past the client's receive limit, a node's past limits.max_message_bytes), a stream reset for
 * metadata past the node's limit. The same request meets the same limit again: not retried.
 * Cairn's own (BACKPRESSURE, REQUEST_TOO_SLOW) carry their code.
 */
function isLimitExceeded(e: ServiceError): boolean {
  return (
    e.code === status.RESOURCE_EXHAUSTED && metadataString(e.metadata, ERROR_CODE_KEY) === undefined
  );
}

/** True when the failure proves the write was not applied, so a retry cannot apply it twice. */
function isProvablyNotApplied(e: ServiceError): boolean {
  const code = metadataString(e.metadata, ERROR_CODE_KEY);
  if (code !== undefined) return NOT_APPLIED_CODES.has(code);
  return isConnectFailure(e) || isNeverSentTimeout(e);
}

function isRetryable(e: ServiceError, kind: Kind): boolean {
  // CANCELLED reaching the client is not its own cancel (an abort ends the attempt before its
  // status is read): the server or a proxy between cut the call. A read is asked again, as
  // docs/client.md says; a write may have been applied (toClientError: indeterminate).
  if (e.code === status.CANCELLED) return kind === "read";
  if (e.code !== status.UNAVAILABLE && e.code !== status.RESOURCE_EXHAUSTED) return false;
  if (isLimitExceeded(e)) return false;
  return kind === "read" || isProvablyNotApplied(e);
}

/** The one mapping of gRPC statuses to client errors. */
function toClientError(e: ServiceError, kind: Kind, tls: boolean): Error {
  const code = metadataString(e.metadata, ERROR_CODE_KEY);
  const details = e.details ?? e.message;
  // A Cairn server sets cairn-error-code on every error it answers: INTERNAL or UNKNOWN without
  // one is grpc-js's own (a stream reset, a call ended without a status, an answer it could not
  // parse), after the request may have arrived and been applied.
  if (
    kind === "write" &&
    code === undefined &&
    (e.code === status.INTERNAL || e.code === status.UNKNOWN)
  )
    return new IndeterminateWriteError(`write outcome unknown: ${details}`, e);
  switch (e.code) {
    case status.FAILED_PRECONDITION:
      if (code === "CAIRN_ERR_VERSION_MISMATCH") {
        // No trailer: the key is absent. A trailer that is not a version is a server's fault,
        // never read as "absent": a compare-and-set loop told so would write with the key
        // expected not to exist, or with a version made up from the garbage.
        const cur = metadataString(e.metadata, CURRENT_VERSION_KEY);
        if (cur === undefined) return new VersionConflictError(details, null);
        const current = parseVersion(cur);
        if (current === null)
          return new ServerError(
            "CAIRN_ERR_INTERNAL",
            `the server refused the compare-and-set (${details}) with a malformed ${CURRENT_VERSION_KEY} trailer ${JSON.stringify(cur.slice(0, 64))}: the key's current version is unknown; nothing was changed`,
            e.code,
          );
        return new VersionConflictError(details, current);
      }
      return new ServerError(code ?? "CAIRN_ERR_FAILED_PRECONDITION", details, e.code);
    case status.INVALID_ARGUMENT:
      return new InvalidRequestError(details);
    case status.DEADLINE_EXCEEDED:
      // A write whose time ran out before grpc-js had a connection for it was never sent.
      return kind === "write" && !isNeverSentTimeout(e)
        ? new IndeterminateWriteError(`write outcome unknown: ${details}`, e)
        : new DeadlineExceededError(details, e);
    case status.UNAVAILABLE:
    case status.RESOURCE_EXHAUSTED:
    case status.CANCELLED:
      // The leader's disk is under its reserve: the Put was not proposed, and a retry would
      // be refused the same until space is freed.
      if (code === "CAIRN_ERR_DISK_FULL") return new ServerError(code, details, e.code);
      if (kind === "write" && !isProvablyNotApplied(e))
        return new IndeterminateWriteError(`write outcome unknown: ${details}`, e);
      // Not "unavailable, retry later": the same request would meet the same limit.
      if (isLimitExceeded(e))
        return new ServerError("CAIRN_ERR_INTERNAL", `${details} (not retried)`, e.code);
      return new UnavailableError(details, e.code, e);
    case status.PERMISSION_DENIED:
      // grpc-js's words for a GOAWAY INADEQUATE_SECURITY: what a TLS node answers a cleartext
      // client with, or (over TLS) a client whose certificate mutual TLS refused.
      if (code === undefined && details === "Protocol not secure enough") {
        return tls
          ? new ServerError(
              "CAIRN_ERR_TLS_CLIENT_REFUSED",
              "the node refused this client's certificate, or its lack of one (mutual TLS, tls.client_ca_file; the node's log says why): give the client a certificate and key its client CA signed (the tls option's cert and key; cairn --cert --key)",
              e.code,
            )
          : new ServerError(
              "CAIRN_ERR_TLS_REQUIRED",
              "the node serves TLS only and refused this cleartext connection before any call: give the client the CA of the node's certificate (the tls option; cairn --cacert)",
              e.code,
            );
      }
      return new ServerError(code ?? "CAIRN_ERR_INTERNAL", details, e.code);
    default:
      return new ServerError(code ?? "CAIRN_ERR_INTERNAL", details, e.code);
  }
}

/**
 * A call's `timeoutMs`, or InvalidRequestError before anything is sent: with NaN every check of
 * the call's time left was false, and it retried without end (its gRPC deadline NaN as well); a
 * call has a deadline, so an infinite one is refused too.
 */
function checkedTimeout(ms: number): number {
  if (!(ms > 0) || !Number.isFinite(ms))
    throw new InvalidRequestError(
      `timeoutMs ${ms}: a call's deadline is a positive, finite number of milliseconds`,
    );
  return ms;
}

/** An option of the constructor, or TypeError when `ok` refuses it. */
function checkedOption(name: string, value: number, ok: (n: number) => boolean): number {
  if (!ok(value)) throw new TypeError(`CairnClient: ${name} ${value} is out of range`);
  return value;
}

/**
 * An expected version as it goes on the wire, or InvalidRequestError before anything is sent:
 * protobufjs writes a uint64 from any number, truncated and modulo 2^64, so NaN and 2^64 went
 * out as 0/0 ("the key must not exist": a compare-and-set with a version computed from nothing
 * created the key) and 1.5 as 1.
 */
function checkedVersion(v: Version): Version {
  const ok = (n: number): boolean => Number.isSafeInteger(n) && n >= 0;
  if (!ok(v.index) || !ok(v.term))
    throw new InvalidRequestError(
      `expectedVersion ${v.index}/${v.term}: index and term must be non-negative safe integers`,
    );
  return v;
}

function version(v: Version__Output | null | undefined): Version {
  return { index: Number(v?.index ?? 0), term: Number(v?.term ?? 0) };
}

function consistencyOf(c: Consistency | undefined): "LINEARIZABLE" | "SERIALIZABLE" {
  return c === "serializable" ? "SERIALIZABLE" : "LINEARIZABLE";
}

function signalOf(o: CallOptions): { signal?: AbortSignal } {
  return o.signal === undefined ? {} : { signal: o.signal };
}

function fromView(v: ClusterView__Output): ClusterView {
  return {
    epoch: Number(v.epoch),
    totalShards: v.total_shards,
    clusterId: v.cluster_id,
    clusterVersion: v.cluster_version,
    nodes: v.nodes.map((n) => ({
      id: n.id,
      rpcAddr: n.rpc_addr,
      httpAddr: n.http_addr,
      state: n.state,
      memberState: n.member_state,
      replicas: n.replicas,
      diskFull: n.disk_full,
      build: n.build,
    })),
    shards: v.shards.map((s) => ({
      id: s.id,
      leader: s.leader,
      replicas: [...s.replicas],
      term: Number(s.term),
    })),
  };
}

/** Waits `ms`; rejects with `signal`'s reason on its abort, and resolves early on `cut`'s. */
function sleep(ms: number, signal: AbortSignal | undefined, cut: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      signal?.removeEventListener("abort", onAbort);
      cut.removeEventListener("abort", done);
      resolve();
    }
    function onAbort(): void {
      clearTimeout(t);
      cut.removeEventListener("abort", done);
      reject(signal?.reason as Error);
    }
    signal?.addEventListener("abort", onAbort, { once: true });
    cut.addEventListener("abort", done, { once: true });
  });
}

/**
 * Whether `address` (HOST:PORT, or a `unix:` socket) stays on this host: 127.0.0.0/8 (also
 * IPv4-mapped, `::ffff:127.0.0.1`), `::1`, `localhost`. Anything else, names included, may cross
 * a network.
 */
export function isLoopbackTarget(address: string): boolean {
  if (address.startsWith("unix:")) return true;
  const parsed = parseHostPort(address);
  return parsed.ok && isLoopbackHost(parsed.value.host);
}

/** Sets `authorization: Bearer TOKEN` on every call. */
function bearer(token: string): Interceptor {
  if (!/^[\x21-\x7e]+$/.test(token))
    throw new TypeError("CairnClient: token must be visible ASCII characters, no spaces");
  const value = `Bearer ${token}`;
  return (options, nextCall) =>
    new InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        metadata.set("authorization", value);
        next(metadata, listener);
      },
    });
}

/** The channels' credentials: cleartext, TLS, or mutual TLS. */
function credentialsOf(tls: TlsOptions | undefined): ChannelCredentials {
  if (tls === undefined) return ChannelCredentials.createInsecure();
  if ((tls.cert === undefined) !== (tls.key === undefined))
    throw new TypeError("CairnClient: tls.cert and tls.key go together (mutual TLS)");
  return ChannelCredentials.createSsl(tls.ca ?? null, tls.key ?? null, tls.cert ?? null);
}
