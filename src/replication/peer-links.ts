/**
 * The transport's connections to its peers, one PeerLink per peer node (etcd's rafthttp peer
 * and its peerStatus; TiKV's raft_client connection pool):
 *
 * - the node's own gRPC client to the peer (GrpcChannel, src/api/grpc-channel.ts), which carries
 *   the long-lived Raft stream and the unary peer calls, and grpc-js's client, which carries
 *   snapshots (it takes the tests' interceptors); both follow the peer's address as `resolve`
 *   gives it, and a PING every 10 s finds a dead peer;
 * - the stream to the peer: opened lazily, by the first frame, with the handshake frame
 *   (handshake.ts's identity); accepted when the peer answers with response headers; and once
 *   it ends (refused, lost, or never opened), not reopened before an exponential backoff with
 *   equal jitter has passed (`initialBackoffMs` doubling to `maxBackoffMs`, reset by an accepted
 *   stream);
 * - the bytes in flight: written and not yet handed to the socket, bounded per peer and over
 *   every peer together (overBudget); one frame is always admitted to a stream with nothing in
 *   flight;
 * - what is owed when a stream ends: the outcome of each frame written and not yet handed over
 *   (false), and the calls waiting for an answer on it (StreamCall, UNAVAILABLE);
 * - unreachable reports: a dropped frame or a failed stream is reported through
 *   `onUnreachable`, later (never from inside a send), several of one peer in a turn merged;
 * - the counters of PeerStats that are the connection's;
 * - the end of a link: a member that left the cluster for good (decommissioned, removed) is
 *   forgotten (forget()), and nothing of it stays; a new member under its id gets a new link;
 * - the links to nodes the meta state here does not record (`known`): at most
 *   UNKNOWN_PEER_LINKS of them idle, the least recently used idle ones dropped past that.
 *
 * What to send, and when to drop instead, is the callers' (GrpcTransport's frames, the call
 * forwarder's calls and replies, the unary calls, the snapshot sender): they ask for the stream
 * and for room in the budget, then write.
 */
import { Client, type ClientOptions, credentials, type Interceptor, status } from "@grpc/grpc-js";
import { loadRaftProto } from "../api/proto.ts";
import { TUNNEL_REFUSED } from "../api/h2/client.ts";
import { type CallResult, type ClientCall, GrpcChannel, TLS_FAILED } from "../api/grpc-channel.ts";
import type { PeerTls } from "../common/peer-tls.ts";
import { IntMap } from "../common/index.ts";
import type { NodeId } from "../raft/index.ts";
import { encodeHandshakeFrame } from "./frame-encode.ts";
import { type ClusterIdSource, ownHandshake } from "./handshake.ts";
import type { PeerLogger } from "./peer-logger.ts";

const MIB = 1024 * 1024;
/** The peers' unary calls (ReadIndex, ProposeMeta, ScanShards) carry at most this much. */
const MAX_UNARY_BYTES = 64 * MIB;
/** A PING to each peer this often; one unanswered this long ends the connection. */
const KEEPALIVE_MS = 10_000;
const KEEPALIVE_TIMEOUT_MS = 5_000;
/** How long close() waits for the streams to finish what was written before it cuts them. */
const CLOSE_DEADLINE_MS = 1000;
/**
 * The links kept to nodes the meta state here does not record as members (PeerLinksOptions
 * `known`), past which the least recently used idle one is dropped. Such a node is answered
 * (handshake.ts peerRefusal: a member that joined while the state here was behind must be
 * heard, chaos seed 103), so its link is made; but anyone who reaches the port and names the
 * cluster's id (public: Meta.WatchCluster) can invent node ids, and one link kept for each, for
 * good, was memory without bound (a review's probe: 10,000 ids, +26 MB never reclaimed). The
 * honest ones are the members that joined while this node was behind, a few at a time
 * (`cluster.max_joining`), until the meta state here catches up and records them: 32 holds
 * them with room to spare, and a node over it only makes a link anew (a new stream) when one
 * it dropped is used again.
 */
export const UNKNOWN_PEER_LINKS = 32;

/** A call's failure as the channel reports one: `sent` says whether any byte may have left. */
export function callFailure(code: status, details: string, sent: boolean): CallResult {
  return { code, details, message: null, trailers: [], sent };
}

/** Something waiting for an answer on a stream (a forwarded call): the stream's end fails it. */
export interface StreamCall {
  /** Whether some of its bytes may have reached the peer. */
  left: boolean;
  /** Settles the call once; later settlements are ignored. */
  settle(result: CallResult): void;
}

export interface PeerStream {
  readonly call: ClientCall;
  /**
   * Calls written on this stream and not answered yet, by id (the call forwarder's). IntMaps,
   * here and below, not a Map or a Set: their churn promotes what the entries reach
   * (src/common/int-map.ts).
   */
  readonly calls: IntMap<StreamCall>;
  inFlightBytes: number;
  accepted: boolean;
  /** Outcome callbacks of frames written and not yet handed to the connection, by write. */
  readonly owed: IntMap<(delivered: boolean) => void>;
  /** Resolves once the call has ended, however. */
  readonly ended: Promise<void>;
}

/** One peer node's connections, backoff and counters; changed by PeerLinks only. */
export interface PeerLink {
  readonly id: NodeId;
  address: string | null;
  /** grpc-js's channel, for snapshots (InstallSnapshot, with the interceptors), and its address. */
  client: Client | null;
  clientAddress: string | null;
  /** The channel of the Raft stream and the unary calls. */
  channel: GrpcChannel | null;
  stream: PeerStream | null;
  /** No stream is opened before this time (now()). */
  retryAt: number;
  /** The next backoff before jitter. */
  backoffMs: number;
  /** Whether the last stream was accepted: failures are logged at warn on the transition. */
  wasConnected: boolean;
  framesSent: number;
  bytesSent: number;
  framesDropped: number;
  bytesDropped: number;
  streamsOpened: number;
  streamFailures: number;
  /** When the link was last asked for (link(): by a frame, a call, an answer, a snapshot). */
  usedAt: number;
}

/** The connection's share of PeerStats (grpc-transport.ts). */
export interface LinkStats {
  /** "idle": never opened or closed cleanly; "connecting": handshake not answered yet. */
  readonly state: "idle" | "connecting" | "connected" | "backoff";
  readonly address: string | null;
  readonly framesSent: number;
  readonly bytesSent: number;
  readonly framesDropped: number;
  /** Of the dropped frames that were encoded (over the size limit or the budget); frames dropped
   * because the stream was down are not encoded, and count in framesDropped only. */
  readonly bytesDropped: number;
  readonly inFlightBytes: number;
  /** Streams opened (the first one included). */
  readonly streamsOpened: number;
  readonly streamFailures: number;
}

/** PeerLinks' settings, defaults resolved (GrpcTransportOptions documents each). */
export interface PeerLinksOptions {
  /** This node: the sender of every stream it opens. */
  readonly self: NodeId;
  readonly replicaId: NodeId;
  readonly clusterId: ClusterIdSource;
  readonly resolve: (nodeId: string) => string | null;
  readonly log: PeerLogger;
  readonly onUnreachable: ((to: NodeId) => void) | undefined;
  readonly maxInFlightBytesPerPeer: number;
  readonly maxInFlightBytes: number;
  /** Larger frames are dropped; also the channels' message limit (with the unary calls'). */
  readonly maxFrameBytes: number;
  readonly initialBackoffMs: number;
  readonly maxBackoffMs: number;
  readonly random: () => number;
  readonly now: () => number;
  readonly interceptors: readonly Interceptor[];
  readonly shardWorker: { readonly index: number; readonly count: number } | undefined;
  /** Peer TLS (GrpcTransportOptions.tls); undefined: cleartext. */
  readonly tls?: PeerTls | undefined;
  /** Aborted when the transport closes: from then on, ends are not failures and nothing is reported. */
  readonly closing: AbortSignal;
  /**
   * Whether the meta state here records node `id` as a member, in any state (GrpcTransportOptions
   * `known`). Absent: every node is.
   */
  readonly known?: ((id: NodeId) => boolean) | undefined;
  /**
   * Whether something holding node `id`'s link outside PeerLinks still uses it (a snapshot
   * lane): the link is not dropped then. Absent: nothing does.
   */
  readonly inUse?: ((id: NodeId) => boolean) | undefined;
  /** Node `id`'s link was dropped (over UNKNOWN_PEER_LINKS): what holds it lets it go. */
  readonly dropped?: ((id: NodeId) => void) | undefined;
}

export class PeerLinks {
  readonly maxFrameBytes: number;
  readonly #self: NodeId;
  readonly #replicaId: NodeId;
  readonly #clusterId: ClusterIdSource;
  readonly #resolve: (nodeId: string) => string | null;
  readonly #log: PeerLogger;
  readonly #onUnreachable: ((to: NodeId) => void) | undefined;
  readonly #maxInFlight: number;
  readonly #maxInFlightTotal: number;
  /** Bytes in flight on every stream together. */
  #inFlightTotal = 0;
  readonly #initialBackoff: number;
  readonly #maxBackoff: number;
  readonly #random: () => number;
  readonly #now: () => number;
  readonly #interceptors: readonly Interceptor[];
  readonly #shardWorker: { readonly index: number; readonly count: number } | undefined;
  readonly #tls: PeerTls | undefined;
  readonly #closing: AbortSignal;
  readonly #path: string;
  readonly #links = new Map<NodeId, PeerLink>();
  readonly #known: (id: NodeId) => boolean;
  readonly #inUse: (id: NodeId) => boolean;
  readonly #dropped: (id: NodeId) => void;
  /**
   * The links made to nodes that were not `known` then (a subset of #links' keys): the ones a
   * drop may take. One the meta state records since leaves it when a drop looks (#maybeDrop).
   */
  readonly #unknown = new Set<NodeId>();
  /** Links dropped over the cap: their streams' ends are no failure and lose nothing. */
  readonly #droppedLinks = new WeakSet<PeerLink>();
  /** Peers with an unreachable report pending (merged until it is delivered). */
  readonly #unreachable = new Set<NodeId>();
  /** Numbers the writes whose outcome is owed (PeerStream.owed). */
  #nextWrite = 1;

  constructor(options: PeerLinksOptions) {
    this.maxFrameBytes = options.maxFrameBytes;
    this.#self = options.self;
    this.#replicaId = options.replicaId;
    this.#clusterId = options.clusterId;
    this.#resolve = options.resolve;
    this.#log = options.log;
    this.#onUnreachable = options.onUnreachable;
    this.#maxInFlight = options.maxInFlightBytesPerPeer;
    this.#maxInFlightTotal = options.maxInFlightBytes;
    this.#initialBackoff = options.initialBackoffMs;
    this.#maxBackoff = Math.max(options.initialBackoffMs, options.maxBackoffMs);
    this.#random = options.random;
    this.#now = options.now;
    this.#interceptors = options.interceptors;
    this.#shardWorker = options.shardWorker;
    this.#tls = options.tls;
    this.#closing = options.closing;
    this.#path = loadRaftProto().cairn.v1.Raft.service.Stream.path;
    this.#known = options.known ?? (() => true);
    this.#inUse = options.inUse ?? (() => false);
    this.#dropped = options.dropped ?? (() => undefined);
  }

  /**
   * Peer node `to`'s link, made on first use; marked used now. Making one to a node not `known`
   * may drop another such link, idle and least recently used (UNKNOWN_PEER_LINKS).
   */
  link(to: NodeId): PeerLink {
    let p = this.#links.get(to);
    if (p !== undefined) p.usedAt = this.#now();
    else {
      p = {
        id: to,
        address: null,
        client: null,
        clientAddress: null,
        channel: null,
        stream: null,
        retryAt: 0,
        backoffMs: this.#initialBackoff,
        wasConnected: false,
        framesSent: 0,
        bytesSent: 0,
        framesDropped: 0,
        bytesDropped: 0,
        streamsOpened: 0,
        streamFailures: 0,
        usedAt: this.#now(),
      };
      this.#links.set(to, p);
      if (!this.#known(to)) {
        this.#unknown.add(to);
        if (this.#unknown.size > UNKNOWN_PEER_LINKS) this.#maybeDrop(to);
      }
    }
    return p;
  }

  /**
   * Drops the least recently used idle links to nodes still not `known`, other than `keep`,
   * until at most UNKNOWN_PEER_LINKS are left, or none idle is: the links in use stay, and the
   * count goes back under the cap as they go idle and new ones come. Idle: nothing its stream
   * owes (no bytes in flight, no frame's outcome, no call waiting for its answer) and nothing
   * else using it (`inUse`); its stream is half-closed and its channels closed gracefully, so
   * that a unary call in flight still finishes. A link of a node the meta state records since
   * leaves the count and stays, as any member's.
   */
  #maybeDrop(keep: NodeId): void {
    const idle: PeerLink[] = [];
    for (const id of this.#unknown) {
      if (this.#known(id)) {
        this.#unknown.delete(id);
        continue;
      }
      const p = this.#links.get(id);
      if (p !== undefined && id !== keep && this.#isIdle(p)) idle.push(p);
    }
    const over = this.#unknown.size - UNKNOWN_PEER_LINKS;
    if (over <= 0) return;
    // Oldest first; the sort is stable, so links used at the same time go in the order made.
    idle.sort((a, b) => a.usedAt - b.usedAt);
    for (const p of idle.slice(0, over)) this.#drop(p);
  }

  #drop(p: PeerLink): void {
    this.#links.delete(p.id);
    this.#unknown.delete(p.id);
    this.#droppedLinks.add(p);
    this.#log.debug("raft link to a node not recorded as a member dropped (over the cap)", {
      peer: p.id,
      address: p.address,
    });
    p.stream?.call.end();
    p.stream = null;
    p.client?.close();
    p.client = null;
    p.channel?.close();
    p.channel = null;
    this.#dropped(p.id);
  }

  #isIdle(p: PeerLink): boolean {
    const s = p.stream;
    const quiet = s === null || (s.inFlightBytes === 0 && s.owed.size === 0 && s.calls.size === 0);
    return quiet && !this.#inUse(p.id);
  }

  /** The peers whose links were not used (link()) since `time` (now()). */
  unusedSince(time: number): NodeId[] {
    const out: NodeId[] = [];
    for (const p of this.#links.values()) if (p.usedAt < time) out.push(p.id);
    return out;
  }

  /** Every link kept (made and not forgotten), in the order they were made. */
  links(): IterableIterator<PeerLink> {
    return this.#links.values();
  }

  /** The open stream to `peer`, opened now if the backoff allows; null while it is down. */
  stream(peer: PeerLink): PeerStream | null {
    if (peer.stream !== null) return peer.stream;
    if (this.#now() < peer.retryAt) return null;
    const address = this.#resolve(peer.id);
    if (address === null) {
      this.#log.debug("raft peer address unknown", { peer: peer.id });
      this.#backOff(peer);
      return null;
    }
    let settle = (): void => undefined;
    const ended = new Promise<void>((resolve) => {
      settle = resolve;
    });
    const call = this.channel(peer, address).clientStream(this.#path);
    const stream: PeerStream = {
      call,
      calls: new IntMap(),
      inFlightBytes: 0,
      accepted: false,
      owed: new IntMap(),
      ended,
    };
    call.onEnd = (result) => {
      settle();
      this.#ended(peer, stream, result.code === status.OK ? null : result);
    };
    call.onHeaders = () => {
      stream.accepted = true;
      peer.backoffMs = this.#initialBackoff;
      if (!peer.wasConnected) this.#log.info("raft peer connected", { peer: peer.id, address });
      peer.wasConnected = true;
    };
    peer.address = address;
    peer.stream = stream;
    peer.streamsOpened++;
    this.write(
      peer,
      stream,
      encodeHandshakeFrame(ownHandshake(this.#clusterId, this.#self, this.#replicaId, peer.id)),
    );
    return stream;
  }

  /**
   * Whether `bytes` more would take `stream` past its in-flight budget or the node's. One frame
   * is always admitted to a stream with nothing in flight, whatever the node-wide total: no peer
   * is starved by the others' backlog.
   */
  overBudget(stream: PeerStream, bytes: number): boolean {
    return (
      stream.inFlightBytes > 0 &&
      (stream.inFlightBytes + bytes > this.#maxInFlight ||
        this.#inFlightTotal + bytes > this.#maxInFlightTotal)
    );
  }

  /**
   * Writes `frame` on `stream`, counted in flight until the connection takes it. `sent` hears
   * once: true when the connection took it, false when the stream ended first.
   */
  write(
    peer: PeerLink,
    stream: PeerStream,
    frame: Buffer,
    sent?: (delivered: boolean) => void,
  ): void {
    stream.inFlightBytes += frame.length;
    this.#inFlightTotal += frame.length;
    peer.framesSent++;
    peer.bytesSent += frame.length;
    // Settled once: by the write's callback, or as lost when the call ends first (#ended).
    const write = this.#nextWrite++;
    if (sent !== undefined) stream.owed.set(write, sent);
    stream.call.write(frame, (err) => {
      stream.inFlightBytes -= frame.length;
      this.#inFlightTotal -= frame.length;
      if (sent !== undefined && stream.owed.delete(write)) sent(err === null);
    });
  }

  /** Counts a frame not sent to `peer` (`bytes`: 0 when it was not encoded). */
  countDropped(peer: PeerLink, bytes: number): void {
    peer.framesDropped++;
    peer.bytesDropped += bytes;
  }

  /** Counts a Raft frame not sent to `peer`, and reports the peer unreachable. */
  drop(peer: PeerLink, bytes: number): void {
    this.countDropped(peer, bytes);
    this.#reportUnreachable(peer.id);
  }

  /** Node `to`'s address as it is now (GrpcTransportOptions.peers), or null when not known. */
  address(to: NodeId): string | null {
    return this.#resolve(to);
  }

  /** grpc-js's channel to `peer` at `address`, for snapshots (a new one when its address changed). */
  client(peer: PeerLink, address: string): Client {
    if (peer.client === null || peer.clientAddress !== address) {
      peer.client?.close();
      const options: ClientOptions = {
        // The channel's own reconnect backoff must not outlast the transport's (default 120 s).
        "grpc.initial_reconnect_backoff_ms": this.#initialBackoff,
        "grpc.max_reconnect_backoff_ms": this.#maxBackoff,
        // A peer behind a dead connection is found by pings, not by a full budget forever.
        "grpc.keepalive_time_ms": 10_000,
        "grpc.keepalive_timeout_ms": 5_000,
        // This node's connections are its own (not shared with another transport in-process).
        "grpc.use_local_subchannel_pool": 1,
      };
      if (this.#interceptors.length > 0) options.interceptors = [...this.#interceptors];
      let creds = credentials.createInsecure();
      if (this.#tls !== undefined) {
        // Each connection with the files as read last (PeerTls.credentials): a reload needs no
        // new channel, and the calls in flight on this one go on.
        const tls = this.#tls.credentials(peer.id);
        creds = tls.credentials;
        Object.assign(options, tls.options);
      }
      peer.client = new Client(address, creds, options);
      peer.clientAddress = address;
    }
    return peer.client;
  }

  /**
   * The node's own channel to `peer` at `address`, for the stream and the unary calls (a new
   * one when its address changed).
   */
  channel(peer: PeerLink, address: string): GrpcChannel {
    if (peer.channel === null || peer.channel.address !== address) {
      peer.channel?.close();
      peer.channel = new GrpcChannel(address, {
        maxMessageBytes: Math.max(this.maxFrameBytes, MAX_UNARY_BYTES),
        // The stream's own backoff (#backOff) paces reconnections; the channel's only spaces
        // the attempts of the unary calls meanwhile.
        reconnectBackoffMs: this.#initialBackoff,
        // A peer behind a dead connection is found by pings, not by a full budget forever.
        keepaliveMs: KEEPALIVE_MS,
        keepaliveTimeoutMs: KEEPALIVE_TIMEOUT_MS,
        ...(this.#shardWorker === undefined ? {} : { shardWorker: this.#shardWorker }),
        ...(this.#tls === undefined ? {} : { tls: this.#tls.dial.bind(this.#tls, peer.id) }),
        peerId: this.#self,
      });
    }
    return peer.channel;
  }

  /** Hands the frames written this turn to the connections now (RaftTransport.flush). */
  flush(): void {
    for (const p of this.#links.values()) p.channel?.flush();
  }

  /**
   * A stream from node `id` was accepted here: it is up now. A stream to it that failed waits
   * out no more backoff (the next frame opens a new one at once), and the next failure backs
   * off from the start. What this node owes a peer that just reached it (the answers to the
   * calls it forwards, its Raft messages' answers) goes back on this node's own stream to it:
   * without this, a peer that restarted had those dropped until the backoff passed (up to
   * `maxBackoffMs`), and a forwarded call whose answer was dropped waited for its deadline.
   * One reset per stream the peer opens, not per frame: a peer this node cannot reach, though
   * it reaches this node, costs one more attempt each time.
   */
  heardFrom(id: NodeId): void {
    const peer = this.#links.get(id);
    if (peer === undefined || peer.stream !== null) return;
    peer.retryAt = 0;
    peer.backoffMs = this.#initialBackoff;
  }

  /**
   * Drops node `id`'s link, which left the cluster for good (decommissioned, removed): nothing
   * of a departed member stays (its link, channels, their connections and timers, its share of
   * the budget). Its stream is cut, which settles what it owes as any stream's end does (frames
   * not handed over lost, calls waiting UNAVAILABLE) and reports it unreachable, without the
   * failure's count, warning or backoff; the unary calls in flight to it fail UNAVAILABLE. A
   * later link() of the id (a new member under it) makes a new link, from the start.
   */
  forget(id: NodeId): void {
    const peer = this.#links.get(id);
    if (peer === undefined) return;
    this.#links.delete(id);
    this.#unknown.delete(id);
    this.#log.info("raft peer left the cluster; its connections closed", {
      peer: id,
      address: peer.address,
    });
    peer.stream?.call.cancel();
    peer.client?.close();
    peer.client = null;
    peer.channel?.destroy();
    peer.channel = null;
  }

  /** The connection's counters and state of `peer`, for PeerStats. */
  stats(peer: PeerLink): LinkStats {
    return {
      state:
        peer.stream !== null
          ? peer.stream.accepted
            ? "connected"
            : "connecting"
          : peer.retryAt > this.#now()
            ? "backoff"
            : "idle",
      address: peer.address,
      framesSent: peer.framesSent,
      bytesSent: peer.bytesSent,
      framesDropped: peer.framesDropped,
      bytesDropped: peer.bytesDropped,
      inFlightBytes: peer.stream?.inFlightBytes ?? 0,
      streamsOpened: peer.streamsOpened,
      streamFailures: peer.streamFailures,
    };
  }

  /**
   * Ends every stream (half-close: frames already written still go out), waits for them to
   * finish within a second, cuts the rest and closes the channels. Called once `closing` is
   * aborted.
   */
  async close(): Promise<void> {
    const streams = [...this.#links.values()].flatMap((p) => (p.stream === null ? [] : [p.stream]));
    for (const s of streams) s.call.end();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(streams.map((s) => s.ended)),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, CLOSE_DEADLINE_MS);
      }),
    ]);
    clearTimeout(timer);
    for (const p of this.#links.values()) {
      p.stream?.call.cancel();
      p.stream = null;
      p.client?.close();
      p.client = null;
      p.channel?.destroy();
      p.channel = null;
    }
  }

  /** The call to `peer` ended: by close(), by the peer (refusal, shutdown) or by the network. */
  #ended(peer: PeerLink, stream: PeerStream, err: CallResult | null): void {
    if (peer.stream === stream) peer.stream = null;
    const owed = stream.owed.values();
    stream.owed.clear();
    for (const sent of owed) sent(false);
    // A call whose bytes left may have reached the peer: its outcome is unknown, as for a
    // unary call whose connection broke (those that never left failed just above).
    for (const c of stream.calls.values()) {
      c.settle(
        callFailure(
          status.UNAVAILABLE,
          `the stream to ${peer.id} ended before it answered`,
          c.left,
        ),
      );
    }
    if (this.#closing.aborted) return;
    if (this.#links.get(peer.id) !== peer) {
      // Forgotten (forget()): the peer left the cluster; its stream was cut on purpose. Or
      // dropped over the cap (#maybeDrop) once idle: its stream ended as asked, owing nothing.
      if (!this.#droppedLinks.has(peer)) this.#reportUnreachable(peer.id);
      return;
    }
    peer.streamFailures++;
    const fields = {
      peer: peer.id,
      address: peer.address,
      code: err === null ? "OK" : status[err.code],
      details: err?.details ?? "",
    };
    // A refusal is a configuration mistake (another cluster, another number of shard workers,
    // not a member): said at every attempt, not once.
    if (
      err?.code === status.FAILED_PRECONDITION ||
      err?.code === status.PERMISSION_DENIED ||
      fields.details.includes(TUNNEL_REFUSED) ||
      fields.details.includes(TLS_FAILED) ||
      // GOAWAY INADEQUATE_SECURITY: this node speaks cleartext to a TLS port.
      fields.details.includes("GOAWAY with error code 12")
    ) {
      this.#log.warn("raft peer refused the stream", fields);
    } else if (peer.wasConnected) {
      this.#log.warn("raft peer stream lost", fields);
    } else {
      this.#log.debug("raft peer stream failed", fields);
    }
    peer.wasConnected = false;
    this.#backOff(peer);
    this.#reportUnreachable(peer.id);
  }

  #backOff(peer: PeerLink): void {
    // "Equal jitter": half the delay is fixed, half random, so retries of several nodes spread.
    const delay = peer.backoffMs / 2 + (peer.backoffMs / 2) * this.#random();
    peer.retryAt = this.#now() + delay;
    peer.backoffMs = Math.min(this.#maxBackoff, peer.backoffMs * 2);
  }

  #reportUnreachable(to: NodeId): void {
    const report = this.#onUnreachable;
    if (report === undefined || this.#unreachable.has(to)) return;
    this.#unreachable.add(to);
    setImmediate(() => {
      this.#unreachable.delete(to);
      if (!this.#closing.aborted) report(to);
    });
  }
}
