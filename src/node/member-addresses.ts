/**
 * Keeps the node's table of its members' addresses (ConnectionSlots.setMembers, the members'
 * reserve of `rpc.max_connections`) up to date with the meta state. The meta state records each
 * member's advertised `rpc_addr`, whose host may be a DNS name (Kubernetes: a pod's stable name,
 * whose IP changes when the pod is replaced); a connection's remoteAddress is an IP. Names are
 * looked up again when the members change, or at most every RESOLVE_EVERY_MS when they do not
 * (the node publishes its members on every gossip event), one update at a time (the newest
 * wins); a name that does not resolve keeps what it resolved to before, or nothing.
 *
 * The table holds MEMBER_SLOTS addresses; the members are given in order of precedence (the
 * active first), and each name counts for at most ADDRESSES_PER_HOST of them. A name a join
 * recorded resolves to whatever its owner's DNS says: before, one name that sorted first and
 * resolved to 200 addresses took the whole table, and the members' connections lost their
 * reserve (a review of 2026-12-06). Lookups run LOOKUPS_AT_ONCE at a time: each holds a thread
 * of libuv's pool, which the node's file I/O shares.
 *
 * A lookup has no timeout of its own (getaddrinfo waits as long as resolv.conf's timeouts and
 * attempts say, and cannot be cancelled). An update waits for one at most LOOKUP_TIMEOUT_MS,
 * then goes on with what the name resolved to before; the lookup runs on, and a later update
 * waits for that same lookup rather than start another. No more than LOOKUPS_AT_ONCE lookups
 * are ever in flight: while slow ones hold them, other names keep their last addresses. A DNS
 * server that does not answer so costs the node at most LOOKUPS_AT_ONCE pool threads, and
 * never holds the table back.
 */
import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import type { ConnectionSlots } from "../api/connection-slots.ts";
import { parseHostPort } from "../config/index.ts";

/** A name's IP addresses (every family). */
export type Resolve = (host: string) => Promise<string[]>;

/** How long the same members' names are not looked up again. */
export const RESOLVE_EVERY_MS = 5000;

/** The addresses one member's name adds to the table at most (a pod's IPv4 and IPv6, say). */
export const ADDRESSES_PER_HOST = 4;

/** Lookups in flight at most. */
const LOOKUPS_AT_ONCE = 2;

/** How long an update waits for one name's lookup. */
export const LOOKUP_TIMEOUT_MS = 2000;

const resolveAll: Resolve = async (host) =>
  (await lookup(host, { all: true, verbatim: true })).map((a) => a.address);

export class MemberAddresses {
  readonly #slots: ConnectionSlots;
  readonly #resolve: Resolve;
  /** The addresses last written (sorted, joined), to skip an update that changes nothing. */
  #written = "";
  /** The hosts waiting for the update under way to end; null when none waits. */
  #next: readonly string[] | null = null;
  #running: Promise<void> | null = null;
  /** What each name resolved to last, kept when a later lookup fails. */
  readonly #resolved = new Map<string, readonly string[]>();
  /** The lookups in flight (at most LOOKUPS_AT_ONCE), by name. */
  readonly #lookups = new Map<string, Promise<void>>();
  readonly #timeoutMs: number;

  /** The hosts of the last update asked for, and when. */
  #asked = "";
  #askedAt = -Infinity;
  readonly #now: () => number;

  constructor(
    slots: ConnectionSlots,
    resolve: Resolve = resolveAll,
    now: () => number = () => performance.now(),
    lookupTimeoutMs: number = LOOKUP_TIMEOUT_MS,
  ) {
    this.#slots = slots;
    this.#resolve = resolve;
    this.#now = now;
    this.#timeoutMs = lookupTimeoutMs;
  }

  /**
   * The members' `rpc_addr`s (`host:port`), as the meta state records them, in order of
   * precedence (the table keeps the first MEMBER_SLOTS addresses). Returns the update's promise
   * (the tests wait for it); it never rejects.
   */
  update(rpcAddrs: readonly string[]): Promise<void> {
    const hosts = [
      ...new Set(
        rpcAddrs.flatMap((a) => {
          const parsed = parseHostPort(a);
          return parsed.ok ? [parsed.value.host] : [];
        }),
      ),
    ];
    const asked = hosts.join(" ");
    const now = this.#now();
    if (asked === this.#asked && now - this.#askedAt < RESOLVE_EVERY_MS) {
      return this.#running ?? Promise.resolve();
    }
    this.#asked = asked;
    this.#askedAt = now;
    this.#next = hosts;
    this.#running ??= this.#drain();
    return this.#running;
  }

  async #drain(): Promise<void> {
    try {
      while (this.#next !== null) {
        const hosts = this.#next;
        this.#next = null;
        const addresses: (readonly string[])[] = [];
        for (let i = 0; i < hosts.length; i += LOOKUPS_AT_ONCE) {
          const some = hosts.slice(i, i + LOOKUPS_AT_ONCE).map((h) => this.#addressesOf(h));
          for (const found of await Promise.all(some)) {
            addresses.push(found.slice(0, ADDRESSES_PER_HOST));
          }
        }
        // A name no member has any more is forgotten.
        for (const name of this.#resolved.keys()) {
          if (!hosts.includes(name)) this.#resolved.delete(name);
        }
        const key = addresses.flat().join(" ");
        if (key === this.#written) continue;
        this.#written = key;
        this.#slots.setMembers(addresses.flat());
      }
    } finally {
      this.#running = null;
    }
  }

  async #addressesOf(host: string): Promise<readonly string[]> {
    if (isIP(host) !== 0) return [host];
    const lookup = this.#lookups.get(host) ?? this.#lookUp(host);
    if (lookup !== undefined) await withTimeout(lookup, this.#timeoutMs);
    return this.#resolved.get(host) ?? [];
  }

  /**
   * Starts looking `host` up unless LOOKUPS_AT_ONCE lookups are in flight (undefined then). The
   * promise never rejects: a failed lookup keeps the name's last addresses.
   */
  #lookUp(host: string): Promise<void> | undefined {
    if (this.#lookups.size >= LOOKUPS_AT_ONCE) return undefined;
    const lookup = this.#resolve(host).then(
      // (A name forgotten meanwhile is forgotten again by the next update: at most
      // LOOKUPS_AT_ONCE such entries, never written to the table.)
      (found) => void this.#resolved.set(host, found),
      () => undefined,
    );
    const done = lookup.finally(() => this.#lookups.delete(host));
    this.#lookups.set(host, done);
    return done;
  }
}

/** Resolves when `p` does or after `ms`, whichever comes first. */
async function withTimeout(p: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
    timer.unref();
  });
  try {
    await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
