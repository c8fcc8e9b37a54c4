/**
 * The membership driver: runs one SWIM core over UDP (`node:dgram`) on the RPC port number.
 * It owns the socket, the tick timer, DNS resolution of seeds, join retries with backoff, the
 * periodic re-contact of seeds and of the members the node's meta state records (`recorded`),
 * the probe round-trip clock and the metrics; the protocol itself is the pure core's
 * (core/swim.ts).
 *
 * Datagrams that do not decode (random bytes, truncated, wrong version, oversized) are counted
 * by reason and dropped; they never reach the core and never throw. With gossip keys (`seal`,
 * seal.ts) every datagram is sealed on its way out and must open on its way in.
 */
import { randomInt } from "node:crypto";
import dgram from "node:dgram";
import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import { networkInterfaces } from "node:os";
import { CairnError, seededRng, type Rng } from "../common/index.ts";
import { canonicalHost, isUnspecifiedHost, sameAddress, sameHost } from "../config/index.ts";
import {
  decodeMessage,
  DEFAULT_TICK_MS,
  isWildcardHost,
  encodeMessage,
  type MemberEvent,
  type MemberEventKind,
  memberId,
  type MemberMeta,
  MembershipConfigError,
  type MemberView,
  parseHostPort,
  ShardCountMismatchError,
  Swim,
  type SwimConfig,
  validateMeta,
} from "./core/index.ts";
import { type DropReason, type MembershipMetrics, noopMembershipMetrics } from "./metrics.ts";
import { type GossipSeal, isSealed, type SealFailureReason } from "./seal.ts";
import { DnsCache } from "./dns-cache.ts";

/** What each reason a datagram did not open means, for the log line that reports it. */
const SEAL_FAILURES: Readonly<Record<SealFailureReason, string>> = {
  "no-key": "sealed, and this node has no cluster.gossip_key_file",
  "unknown-key": "sealed with a key cluster.gossip_key_file does not list",
  "bad-seal": "does not open: forged, altered or cut short",
  unsealed: "cleartext, and cluster.gossip_plaintext is refuse",
  oversized: "longer than any sealed datagram",
};

export interface MembershipLogger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

const silentLogger: MembershipLogger = { info: () => {}, warn: () => {}, error: () => {} };

/** A member the node's own records name (the meta state's), and the address it gossips on. */
export interface RecordedMember {
  readonly id: string;
  /** Its `rpc_addr` as recorded: SWIM's UDP runs on the RPC port number, so also its gossip's. */
  readonly rpcAddr: string;
}

/**
 * Recorded members a join attempt or a re-contact round sends a full-state exchange to, at most
 * (in turn over the list, so that every one is asked within a few rounds), besides the seeds: a
 * cluster records up to 1,024 members, and one round must not send to all of them.
 */
export const RECORDED_PER_ROUND = 8;

/** Recorded members read from `recorded()` at most (the rest are ignored). */
export const MAX_RECORDED = 2048;

export interface MembershipOptions {
  readonly nodeId: string;
  /** `rpc_addr`: the UDP socket binds the same host and port number. Port 0 picks a free one. */
  readonly bindAddr: string;
  /** `advertise_rpc_addr`; defaults to bindAddr (with the bound port). Never a wildcard. */
  readonly advertiseRpcAddr?: string;
  /** `advertise_http_addr`: what other nodes and clients use to reach this node's HTTP server. */
  readonly advertiseHttpAddr: string;
  readonly totalShards: number;
  /** `cluster.seed_nodes`: `host:port`, host names allowed; empty for a single node. */
  readonly seeds: readonly string[];
  /**
   * The other members this node's own records name (a restarted member's meta state: active,
   * joining, decommissioning or dead ones, never removed ones nor itself), read again at each
   * join attempt and each re-contact round: they are joined and re-contacted through besides
   * the seeds (RECORDED_PER_ROUND a round). A member restarted gracefully is `left` in its
   * peers' views, which never probe it again: without this, seeds that no longer name a live
   * member (the first ones decommissioned and removed since) left it out of gossip for good,
   * and the cluster marked it dead. Host names among them are looked up through the DNS cache
   * (one at a time), one not looked up yet a round.
   */
  readonly recorded?: () => Iterable<RecordedMember>;
  readonly tickMs?: number;
  readonly config?: Partial<SwimConfig>;
  readonly rng?: Rng;
  readonly metrics?: MembershipMetrics;
  readonly logger?: MembershipLogger;
  /** First and longest wait between two join attempts. */
  readonly joinBackoffMs?: { readonly initial: number; readonly max: number };
  /** How often seeds that are not live members are contacted again (0: never). */
  readonly seedRecontactMs?: number;
  /** `cluster.gossip_key_file`: seals what is sent and opens what arrives (seal.ts). */
  readonly seal?: GossipSeal;
}

/** A membership change with the member list as it is right after it. */
export interface MembershipEvent {
  readonly kind: MemberEventKind;
  readonly member: MemberView;
  readonly members: readonly MemberView[];
}

export interface MembershipStats {
  readonly datagramsReceived: number;
  readonly datagramsSent: number;
  /** Datagrams not sent: the socket refused them, or their host name has no address (yet). */
  readonly sendErrors: number;
  readonly dropped: Readonly<Partial<Record<DropReason, number>>>;
}

/**
 * SWIM's UDP socket, bound on `bindAddr` (`rpc_addr`: host and port; port 0 picks one). A bind
 * failure is the socket's error (`syscall` "bind").
 */
export async function bindGossipSocket(bindAddr: string): Promise<dgram.Socket> {
  const bind = parseHostPort(bindAddr, true);
  if (bind === null) {
    throw new MembershipConfigError(`rpc_addr must be <host>:<port>, got "${bindAddr}"`);
  }
  const { address, family } = await lookup(bind.host);
  const socket = dgram.createSocket({ type: family === 6 ? "udp6" : "udp4" });
  await new Promise<void>((resolve, reject) => {
    socket.once("error", reject);
    socket.bind(bind.port, address, () => {
      socket.off("error", reject);
      resolve();
    });
  });
  return socket;
}

/** join() gave up because the membership was closed first. */
export class MembershipClosedError extends CairnError {
  constructor() {
    super("CAIRN_ERR_MEMBERSHIP_CLOSED", "membership closed before it joined the cluster");
    this.name = "MembershipClosedError";
  }
}

/** How long a ping's send time is kept waiting for its ack. */
const RTT_WINDOW_MS = 5_000;

/**
 * A problem the gossip reports (another shard count, a node id used twice) is logged once per
 * kind and sender this often at most: it comes from unauthenticated UDP, one per datagram, and a
 * flood of datagrams must not become a flood of ERROR lines. At most MAX_REPORTED problems are
 * remembered, so at most that many lines a period, however many senders.
 */
const REPORT_EVERY_MS = 60_000;
export const MAX_REPORTED = 256;

export class Membership {
  readonly #socket: dgram.Socket;
  readonly #swim: Swim;
  readonly #options: MembershipOptions;
  readonly #metrics: MembershipMetrics;
  readonly #log: MembershipLogger;
  readonly #tickMs: number;
  readonly #rng: Rng;
  readonly #timers: NodeJS.Timeout[] = [];
  readonly #listeners = new Set<(e: MembershipEvent) => void>();
  readonly #refusals = new Set<(e: ShardCountMismatchError) => void>();
  readonly #replyWaiters = new Set<() => void>();
  readonly #closeWaiters = new Set<() => void>();
  readonly #dnsCache: DnsCache;
  readonly #pingSentAt = new Map<number, bigint>();
  readonly #boundHost: string;
  readonly #boundPort: number;
  readonly #family: 4 | 6;
  /**
   * The address family looked up for seeds and members: both when the socket is IPv6 bound on
   * `::` (dual-stack: IPv4 peers are reached as `::ffff:a.b.c.d`), else the socket's.
   */
  readonly #lookupFamily: 0 | 4 | 6;
  #closed = false;
  /** A re-contact round is under way (#recontactSeeds). */
  #recontacting = false;
  #inFlight = 0;
  /** When each problem (kind and sender) was last logged (REPORT_EVERY_MS). */
  readonly #reported = new Map<string, number>();
  /** SWIM's refusedMembers when last logged, and when (its own clock: #reported may be full). */
  #refusedLogged = 0;
  #refusedLoggedAt = -Infinity;
  #drained: (() => void) | null = null;
  /** Where the next round of recorded members starts (#recordedRound), and its names'. */
  #recordedTurn = 0;
  #unresolvedTurn = 0;
  #stats = {
    datagramsReceived: 0,
    datagramsSent: 0,
    sendErrors: 0,
    dropped: {} as Partial<Record<DropReason, number>>,
  };

  /**
   * Binds the socket (or takes `socket`, bound by bindGossipSocket) and starts the protocol.
   * Call join() to find the cluster.
   */
  static async start(options: MembershipOptions, socket?: dgram.Socket): Promise<Membership> {
    return new Membership(options, socket ?? (await bindGossipSocket(options.bindAddr)));
  }

  private constructor(options: MembershipOptions, socket: dgram.Socket) {
    this.#options = options;
    this.#socket = socket;
    this.#metrics = options.metrics ?? noopMembershipMetrics;
    this.#log = options.logger ?? silentLogger;
    this.#tickMs = options.tickMs ?? DEFAULT_TICK_MS;
    const bound = socket.address();
    this.#boundHost = bound.address;
    this.#boundPort = bound.port;
    this.#family = bound.family === "IPv6" ? 6 : 4;
    this.#lookupFamily = this.#family === 6 && bound.address === "::" ? 0 : this.#family;
    this.#dnsCache = new DnsCache({
      lookup: (host) => lookup(host, { family: this.#lookupFamily }),
      // Once a period a name, MAX_REPORTED names a period at most: the names come from gossip.
      failed: (host, err) => {
        if (this.#shouldReport(`dns ${host}`))
          this.#log.warn("cannot resolve a member address", { host, error: String(err) });
      },
      now: () => Number(process.hrtime.bigint() / 1_000_000n),
    });
    const bindHost = options.bindAddr.slice(0, options.bindAddr.lastIndexOf(":"));
    const rpcAddr = options.advertiseRpcAddr ?? `${bindHost}:${bound.port}`;
    const self: MemberMeta = {
      id: memberId(options.nodeId),
      rpcAddr,
      httpAddr: options.advertiseHttpAddr,
      totalShards: options.totalShards,
    };
    this.#rng = options.rng ?? seededRng(randomInt(2 ** 32));
    try {
      validateMeta(self);
      this.#swim = new Swim({
        self,
        // A restarted node starts at incarnation 0 and refutes whatever the cluster remembers.
        rng: this.#rng.fork(),
        ...(options.config === undefined ? {} : { config: options.config }),
      });
    } catch (e) {
      socket.close();
      throw e;
    }
    socket.on("message", (msg, rinfo) => this.#receive(msg, rinfo));
    socket.on("error", (err) => this.#log.error("membership socket error", { error: err.message }));
    this.#timers.push(setInterval(() => this.#tick(), this.#tickMs));
    const recontact = options.seedRecontactMs ?? 30_000;
    if (recontact > 0 && (options.seeds.length > 0 || options.recorded !== undefined)) {
      // One round at a time: behind a DNS server that does not answer, a seed's lookup takes
      // tens of seconds (resolv.conf's timeouts, each search domain), and a round started beside
      // the one still waiting added lookups faster than they ended, every other lookup of the
      // process queued behind them (libuv runs two at once).
      this.#timers.push(
        setInterval(() => {
          if (this.#recontacting) return;
          this.#recontacting = true;
          void this.#recontactSeeds().finally(() => (this.#recontacting = false));
        }, recontact),
      );
    }
    this.#metrics.onClusterSize(this.#swim.liveCount);
    this.#log.info("membership started", {
      node_id: self.id,
      rpc_addr: rpcAddr,
      udp_port: bound.port,
    });
  }

  /** This node as announced. */
  get self(): MemberMeta {
    return this.#swim.self;
  }

  /** The UDP address actually bound, `host:port`. */
  get boundAddr(): string {
    return formatAddr(this.#boundHost, this.#boundPort);
  }

  members(): MemberView[] {
    return this.#swim.members();
  }

  /**
   * The cluster's members (the meta state's ids): a table full of made-up members makes room
   * for them (Swim.reserve).
   */
  reserve(ids: ReadonlySet<string>): void {
    this.#swim.reserve(ids);
  }

  stats(): MembershipStats {
    return { ...this.#stats, dropped: { ...this.#stats.dropped } };
  }

  /** Subscribes to membership changes; returns the unsubscribe function. */
  onEvent(listener: (e: MembershipEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Joins the cluster through the seeds and the recorded members (`recorded`, read again at each
   * attempt): every attempt resolves every seed and starts a full-state exchange with each, and
   * with RECORDED_PER_ROUND recorded members in turn; attempts repeat with exponential backoff
   * and full jitter until one answers. Resolves at once when there are no seeds and no recorded
   * members, or every seed resolves to this node and no member is recorded. A seed that does not
   * resolve (yet) is retried like one that does not answer. Rejects with ShardCountMismatchError
   * when a seed refuses this node's `total_shards` (a recorded member's refusal is no seed's:
   * another node may have its address now; retried), and with MembershipClosedError when
   * close() or leave() comes first.
   */
  async join(): Promise<void> {
    if (this.#options.seeds.length === 0 && !this.#recordsAny()) return;
    const backoff = this.#options.joinBackoffMs ?? { initial: 500, max: 10_000 };
    let base = backoff.initial;
    for (let attempt = 1; ; attempt++) {
      if (this.#closed) throw new MembershipClosedError();
      const { addrs: resolved, unresolved } = await this.#resolveSeeds();
      const seeds = resolved.filter((a) => !this.#isSelf(a));
      const recorded = this.#recordedRound(() => false);
      // Every seed is this node, and it records no other member: a cluster of one so far. A seed
      // that does not resolve yet is another node (the other pods of a StatefulSet, named in no
      // DNS until they run): the join ended at once as a cluster of one beside it, and reached
      // the others only at the next re-contact, 30 s on.
      if (resolved.length > 0 && seeds.length === 0 && unresolved === 0 && recorded.length === 0)
        return;
      // Full jitter keeps nodes restarted together from retrying in lockstep.
      const wait = Math.round(base / 2 + this.#rng.float() * (base / 2));
      const outcome = await this.#attemptJoin(seeds, recorded, wait);
      switch (outcome) {
        case "answered":
          this.#log.info("joined the cluster", { attempt, members: this.#swim.liveCount });
          return;
        case "closed":
          throw new MembershipClosedError();
        case "timeout":
          this.#log.warn("no seed answered; retrying", {
            attempt,
            seeds: this.#options.seeds,
            ...(recorded.length === 0 ? {} : { recorded_members_asked: recorded }),
            next_ms: wait,
          });
          base = Math.min(backoff.max, base * 2);
          break;
        default:
          throw outcome;
      }
    }
  }

  /**
   * One join attempt: push-pull to `addrs` (the seeds') and `recorded`, then wait for a reply, a
   * seed's refusal, close or `wait`.
   */
  #attemptJoin(
    addrs: readonly string[],
    recorded: readonly string[],
    wait: number,
  ): Promise<"answered" | "timeout" | "closed" | ShardCountMismatchError> {
    if (this.#closed) return Promise.resolve("closed");
    const before = this.#swim.pushPullReplies;
    return new Promise((resolve) => {
      const done = (o: "answered" | "timeout" | "closed" | ShardCountMismatchError): void => {
        clearTimeout(timer);
        this.#replyWaiters.delete(onReply);
        this.#refusals.delete(onRefusal);
        this.#closeWaiters.delete(onClose);
        resolve(o);
      };
      const onReply = (): void => {
        if (this.#swim.pushPullReplies > before) done("answered");
      };
      // Only a `refuse` naming another shard count, from a seed this attempt asked, refuses
      // the join: any other datagram (a node of another cluster that still knows this address,
      // a ping from one, or a forgery) is reported, not fatal; a `refuse` naming this node's own
      // total_shards is no refusal at all (the core drops it).
      const onRefusal = (e: ShardCountMismatchError): void => {
        if (e.refusal && e.addr !== null && addrs.includes(e.addr)) done(e);
      };
      const onClose = (): void => done("closed");
      const timer = setTimeout(() => done("timeout"), wait);
      this.#replyWaiters.add(onReply);
      this.#refusals.add(onRefusal);
      this.#closeWaiters.add(onClose);
      this.#swim.join([...addrs, ...recorded.filter((a) => !addrs.includes(a))]);
      this.#flush();
    });
  }

  /** Announces a graceful leave, waits until the datagrams are handed to the OS, then closes. */
  async leave(): Promise<void> {
    if (this.#closed) return;
    this.#swim.leave();
    this.#flush();
    if (this.#inFlight > 0) await new Promise<void>((resolve) => (this.#drained = resolve));
    await this.close();
  }

  /** Stops at once, without telling anyone (others will detect the failure). */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const t of this.#timers) clearInterval(t);
    for (const w of [...this.#closeWaiters]) w();
    await new Promise<void>((resolve) => this.#socket.close(() => resolve()));
  }

  // ---- internals ------------------------------------------------------------------------------

  #tick(): void {
    if (this.#closed) return;
    this.#swim.tick();
    const cutoff = process.hrtime.bigint() - BigInt(RTT_WINDOW_MS) * 1_000_000n;
    for (const [seq, at] of this.#pingSentAt) if (at < cutoff) this.#pingSentAt.delete(seq);
    this.#flush();
  }

  #receive(msg: Buffer, rinfo: dgram.RemoteInfo): void {
    if (this.#closed) return;
    this.#stats.datagramsReceived += 1;
    const seal = this.#options.seal;
    let bytes: Uint8Array = msg;
    if (seal !== undefined) {
      const opened = seal.unwrap(msg);
      if (!opened.ok) return this.#dropUnopened(opened.reason, rinfo);
      bytes = opened.bytes;
    } else if (isSealed(msg)) {
      return this.#dropUnopened("no-key", rinfo);
    }
    const decoded = decodeMessage(bytes);
    if (!decoded.ok) return this.#drop(decoded.reason);
    const m = decoded.message;
    if (m.type === "ack") {
      const sentAt = this.#pingSentAt.get(m.seq);
      if (sentAt !== undefined) {
        this.#pingSentAt.delete(m.seq);
        this.#metrics.observeGossipLatencyMs(Number(process.hrtime.bigint() - sentAt) / 1e6);
      }
    }
    this.#swim.handle(formatAddr(unmapped(rinfo.address), rinfo.port), m);
    this.#flush();
  }

  /**
   * A datagram the keys do not open (or that has none): counted, and logged once a period per
   * reason and sender, so that an operator sees a member on other keys, or an intruder.
   */
  #dropUnopened(reason: SealFailureReason, rinfo: dgram.RemoteInfo): void {
    this.#drop(reason);
    const from = formatAddr(unmapped(rinfo.address), rinfo.port);
    if (!this.#shouldReport(`seal ${reason} ${from}`)) return;
    this.#log.warn("gossip datagram dropped: not sealed with this node's gossip keys", {
      reason,
      from,
      why: SEAL_FAILURES[reason],
    });
  }

  #drop(reason: DropReason): void {
    this.#stats.dropped[reason] = (this.#stats.dropped[reason] ?? 0) + 1;
    this.#metrics.onDatagramDropped(reason);
  }

  /**
   * Carries out what the core asks: send, then report. Runs in the socket's 'message' handler and
   * the tick timer: nothing in it may throw. A datagram that cannot go (an address that does not
   * parse, a name not resolved yet, a send that throws) is dropped, as a lost one would be.
   */
  #flush(): void {
    const ready = this.#swim.takeReady();
    for (const out of ready.messages) {
      if (this.#closed) break;
      const target = parseHostPort(out.to);
      if (target === null) {
        this.#stats.sendErrors += 1;
        this.#unsent(out.to, "not an address");
        continue;
      }
      // Never a host name: dgram would look it up again, for each datagram, past the cache's cap.
      const resolved =
        isIP(target.host) !== 0 ? target.host : this.#dnsCache.addressOf(target.host);
      if (resolved === null) {
        this.#stats.sendErrors += 1; // not resolved (yet): the protocol takes it as lost
        continue;
      }
      let bytes: Uint8Array;
      try {
        bytes = encodeMessage(out.message);
        if (this.#options.seal !== undefined) bytes = this.#options.seal.wrap(bytes);
      } catch (e) {
        this.#log.error("membership could not encode a message (a bug)", { error: String(e) });
        continue;
      }
      if (out.message.type === "ping" && out.message.from === this.#swim.self.id) {
        this.#pingSentAt.set(out.message.seq, process.hrtime.bigint());
      }
      // A member advertising an IPv4-mapped address is sent to at its IPv4 address: an IPv4
      // socket cannot send to it as written (EINVAL), and an IPv6 one has it mapped again.
      const host = canonicalHost(resolved);
      // An IPv6 socket cannot send to an IPv4 address as such (EINVAL): only v4-mapped.
      const to = this.#family === 6 && isIP(host) === 4 ? `::ffff:${host}` : host;
      this.#inFlight += 1;
      try {
        this.#socket.send(bytes, target.port, to, (err) => this.#sent(err === null));
      } catch (e) {
        this.#sent(false);
        this.#unsent(out.to, String(e));
      }
    }
    for (const err of ready.errors) {
      if (this.#shouldReport(`${err.code} ${err.peer}`)) {
        this.#log.error(err.message, { code: err.code, peer: err.peer });
      }
      if (err instanceof ShardCountMismatchError) for (const r of [...this.#refusals]) r(err);
    }
    const refused = this.#swim.refusedMembers;
    if (
      refused > this.#refusedLogged &&
      performance.now() - this.#refusedLoggedAt >= REPORT_EVERY_MS
    ) {
      this.#log.warn(
        "gossip named more members than this node remembers; updates about new ones ignored (is a host flooding the gossip port?)",
        { ignored: refused - this.#refusedLogged, remembered: this.#swim.members().length - 1 },
      );
      this.#refusedLogged = refused;
      this.#refusedLoggedAt = performance.now();
    }
    if (ready.events.length > 0) this.#report(ready.events);
    for (const w of [...this.#replyWaiters]) w();
  }

  /** A send handed to the socket has ended (or threw). */
  #sent(ok: boolean): void {
    this.#inFlight -= 1;
    if (ok) this.#stats.datagramsSent += 1;
    else this.#stats.sendErrors += 1;
    if (this.#inFlight === 0 && this.#drained !== null) {
      const drained = this.#drained;
      this.#drained = null;
      drained();
    }
  }

  /** A datagram for `to` that could not be sent: counted, logged once a period per address. */
  #unsent(to: string, why: string): void {
    if (this.#shouldReport(`unsent ${to}`)) {
      this.#log.warn("membership could not send a datagram; dropped", { to, error: why });
    }
  }

  /** Whether problem `key` may be logged now (REPORT_EVERY_MS); records it when so. */
  #shouldReport(key: string): boolean {
    const now = performance.now();
    const last = this.#reported.get(key);
    if (last !== undefined && now - last < REPORT_EVERY_MS) return false;
    if (last === undefined && this.#reported.size >= MAX_REPORTED) {
      // Full: forget the problems not logged within the period; with none to forget, this one
      // is not logged (at most MAX_REPORTED lines a period, however many senders).
      for (const [k, at] of this.#reported)
        if (now - at >= REPORT_EVERY_MS) this.#reported.delete(k);
      if (this.#reported.size >= MAX_REPORTED) return false;
    }
    this.#reported.set(key, now);
    return true;
  }

  #report(events: readonly MemberEvent[]): void {
    const members = this.#swim.members();
    for (const e of events) {
      if (e.kind === "dead") this.#metrics.onMemberFailed();
      const level = e.kind === "dead" || e.kind === "suspect" ? "warn" : "info";
      this.#log[level](`member ${e.kind}`, {
        member: e.member.meta.id,
        incarnation: e.member.incarnation,
        rpc_addr: e.member.meta.rpcAddr,
      });
      for (const l of this.#listeners) l({ kind: e.kind, member: e.member, members });
    }
    this.#metrics.onClusterSize(this.#swim.liveCount);
  }

  /**
   * Every seed's addresses, `ip:port` (this node's advertised address as it is); a seed that does
   * not resolve is skipped this round, and counted (`unresolved`).
   */
  async #resolveSeeds(): Promise<{ addrs: string[]; unresolved: number }> {
    const out: string[] = [];
    let unresolved = 0;
    for (const seed of this.#options.seeds) {
      // Itself, whatever the name resolves to (behind NAT, not an address of this host), and
      // however it is written (`Node-1` for `node-1`, `[::ffff:10.0.0.1]` for `10.0.0.1`).
      if (sameAddress(seed, this.#swim.self.rpcAddr)) {
        out.push(seed);
        continue;
      }
      const parsed = parseHostPort(seed);
      if (parsed === null) {
        this.#log.warn("ignoring a malformed seed", { seed });
        continue;
      }
      try {
        // Only addresses of the socket's family can be reached from it (both on a dual-stack one).
        // An IP literal comes back as written: `[::ffff:10.0.0.2]` as 10.0.0.2 (canonicalHost),
        // which an IPv4 socket can send to, and which a sender's address is reported as.
        for (const a of await lookup(parsed.host, { all: true, family: this.#lookupFamily })) {
          out.push(formatAddr(canonicalHost(a.address), parsed.port));
        }
      } catch (e) {
        unresolved += 1;
        this.#log.warn("cannot resolve a seed", { seed, error: String(e) });
      }
    }
    return { addrs: out, unresolved };
  }

  /**
   * True when `addr` is this node: its advertised address (which the core never sends to, and
   * which may not be one this host binds, behind NAT), or an `ip:port` reaching this very socket.
   * Addresses are compared as what they name, not as written (sameAddress, sameHost): a seed
   * `[::ffff:127.0.0.1]` or `[0:0:0:0:0:0:0:1]` naming this node was taken for another, and the
   * join sent push-pulls to itself, or to nowhere, and waited for an answer for ever.
   */
  #isSelf(addr: string): boolean {
    if (sameAddress(addr, this.#swim.self.rpcAddr)) return true;
    const p = parseHostPort(addr);
    if (p === null || p.port !== this.#boundPort) return false;
    if (sameHost(p.host, this.#boundHost)) return true;
    return isUnspecifiedHost(this.#boundHost) && localAddresses().has(canonicalHost(p.host));
  }

  /**
   * Every seed that is not a live member, and RECORDED_PER_ROUND recorded members in turn that
   * gossip does not have alive or suspect (left, dead, or not heard of since this node started),
   * get a full-state exchange: a member restarted gracefully is `left` in its peers' views, which
   * never probe it again, and this is how it (or they, after a partition) comes back.
   */
  async #recontactSeeds(): Promise<void> {
    if (this.#closed || this.#swim.isLeaving) return;
    const live = this.#swim.members().filter((m) => m.state === "alive" || m.state === "suspect");
    const liveAddrs = new Set(live.map((m) => m.meta.rpcAddr));
    const liveIds = new Set<string>(live.map((m) => m.meta.id));
    const { addrs: seeds } = await this.#resolveSeeds();
    if (this.#closed || this.#swim.isLeaving) return;
    for (const addr of seeds) {
      if (!liveAddrs.has(addr) && !this.#isSelf(addr)) this.#swim.pushPull(addr);
    }
    for (const addr of this.#recordedRound((id) => liveIds.has(id))) {
      if (!liveAddrs.has(addr)) this.#swim.pushPull(addr);
    }
    this.#flush();
  }

  /** Whether `recorded` names any member. */
  #recordsAny(): boolean {
    const provider = this.#options.recorded;
    return provider !== undefined && provider()[Symbol.iterator]().next().done !== true;
  }

  /**
   * This round's recorded members to contact, their addresses as recorded: RECORDED_PER_ROUND
   * at most of those whose address can be sent to now (an IP literal, or a name the DNS cache
   * has an address for), the next ones each round; and one more whose name has no address yet,
   * in turn too (its datagram starts its lookup, within the cache's one at a time; the next
   * round sends to it once it resolved). Never this node, a member `skip` names, or an address
   * that is none (a wildcard, malformed).
   */
  #recordedRound(skip: (id: string) => boolean): string[] {
    const provider = this.#options.recorded;
    if (provider === undefined) return [];
    const ready: string[] = [];
    const unresolved: string[] = [];
    const seen = new Set<string>();
    let read = 0;
    for (const m of provider()) {
      if (++read > MAX_RECORDED) break;
      if (m.id === this.#swim.self.id || skip(m.id) || seen.has(m.rpcAddr)) continue;
      seen.add(m.rpcAddr);
      const p = parseHostPort(m.rpcAddr);
      if (p === null || isWildcardHost(p.host) || this.#isSelf(m.rpcAddr)) continue;
      if (isIP(p.host) !== 0 || this.#dnsCache.cachedAddressOf(p.host) !== null)
        ready.push(m.rpcAddr);
      else unresolved.push(m.rpcAddr);
    }
    const out: string[] = [];
    const take = Math.min(RECORDED_PER_ROUND, ready.length);
    const start = ready.length === 0 ? 0 : this.#recordedTurn % ready.length;
    for (let i = 0; i < take; i++) out.push(ready[(start + i) % ready.length] as string);
    this.#recordedTurn = ready.length === 0 ? 0 : (start + take) % ready.length;
    if (unresolved.length > 0) {
      const next = this.#unresolvedTurn % unresolved.length;
      out.push(unresolved[next] as string);
      this.#unresolvedTurn = (next + 1) % unresolved.length;
    }
    return out;
  }
}

function formatAddr(host: string, port: number): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}

/** An IPv4 sender on a dual-stack socket (`::ffff:a.b.c.d`) as its IPv4 address. */
function unmapped(address: string): string {
  const v4 = address.toLowerCase().startsWith("::ffff:") ? address.slice(7) : "";
  return isIP(v4) === 4 ? v4 : address;
}

/** This host's addresses, canonicalHost's spelling. */
function localAddresses(): Set<string> {
  const out = new Set<string>(["127.0.0.1", "::1"]);
  for (const list of Object.values(networkInterfaces())) {
    for (const i of list ?? []) out.add(canonicalHost(i.address));
  }
  return out;
}
