/**
 * The addresses SWIM sends to, for members named by host name: the result of a lookup, looked
 * up again in the background once it is DNS_TTL_MS old. A name has no address until its first
 * lookup returns: the datagram is not sent (the protocol takes it as lost). The host name itself
 * is never handed to the socket: dgram looked it up again for every datagram, a second lookup
 * beside the cache's, and a NUL byte in it made dns.lookup throw inside the UDP handler.
 *
 * At most MAX_LOOKUPS_IN_FLIGHT lookups run at once: each holds a thread of libuv's pool, which
 * the node's file I/O shares, for as long as resolv.conf's timeouts say, and cannot be cancelled;
 * and libuv runs at most half its pool's threads (2 of the default 4) on lookups at once, for
 * the whole process. Past it a name is not looked up (nor queued): it is asked for again with
 * the next datagram. Four made-up names behind a DNS server that does not answer used to hold
 * every thread for minutes (review probe p3: the node's own lookup of `localhost` waited 40 s);
 * with two lookups of SWIM's at once, every other lookup of the node still waited for one of
 * them (src/node/member-addresses.ts caps its own lookups too).
 */

/** How long a looked-up address is used before it is looked up again. */
export const DNS_TTL_MS = 30_000;

/** How soon a name whose lookup failed is looked up again (what it had before is kept). */
export const DNS_RETRY_MS = 1_000;

/**
 * Lookups in flight at most: one, so that the other lookup libuv runs at once stays the rest of
 * the node's (a gRPC connection to a peer by name, src/node/member-addresses.ts).
 */
export const MAX_LOOKUPS_IN_FLIGHT = 1;

/**
 * Host names remembered at most: twice SWIM's member table (SwimConfig.maxMembers, 2,048 by
 * default), so that members come and go without looking up the ones that stay. The names come
 * from gossip: a forged member under a made-up name each datagram grew the cache for good.
 * Past it, the oldest name asked for is forgotten (looked up again when next asked for).
 */
export const MAX_DNS_ENTRIES = 4096;

export interface DnsCacheOptions {
  /** One lookup of `host` (node:dns/promises `lookup` with the socket's family). */
  readonly lookup: (host: string) => Promise<{ address: string }>;
  /** A lookup that failed, or threw (logged by the caller). */
  readonly failed: (host: string, err: unknown) => void;
  /** Milliseconds, monotonic. */
  readonly now: () => number;
}

interface Entry {
  /** The last address found; null until a lookup found one. */
  address: string | null;
  expiresAt: number;
  refreshing: boolean;
}

export class DnsCache {
  readonly #o: DnsCacheOptions;
  readonly #entries = new Map<string, Entry>();
  #inFlight = 0;

  constructor(options: DnsCacheOptions) {
    this.#o = options;
  }

  /** Host names remembered. */
  get size(): number {
    return this.#entries.size;
  }

  /** Lookups started and not returned yet. */
  get lookupsInFlight(): number {
    return this.#inFlight;
  }

  /**
   * The last address a lookup found for `host`, or null when none has: starts no lookup (which
   * addresses can be sent to now, for the membership's choice of recorded members to contact).
   */
  cachedAddressOf(host: string): string | null {
    return this.#entries.get(host)?.address ?? null;
  }

  /**
   * The address to send to for `host` now: the last one a lookup found, or null when none has
   * (the datagram is dropped). Starts a lookup when the name is new or its address is old, if
   * fewer than MAX_LOOKUPS_IN_FLIGHT are running. Never throws.
   */
  addressOf(host: string): string | null {
    const now = this.#o.now();
    const cached = this.#entries.get(host);
    if (cached !== undefined && (cached.expiresAt > now || cached.refreshing)) {
      return cached.address;
    }
    // A slot is free when a lookup returns: until then, dropped rather than queued.
    if (this.#inFlight >= MAX_LOOKUPS_IN_FLIGHT) return cached?.address ?? null;
    const entry: Entry = cached ?? { address: null, expiresAt: now, refreshing: false };
    entry.refreshing = true;
    // Re-inserted at the end: the map is in the order the names were last looked up.
    this.#entries.delete(host);
    if (this.#entries.size >= MAX_DNS_ENTRIES) {
      const oldest = this.#entries.keys().next();
      if (oldest.done !== true) this.#entries.delete(oldest.value);
    }
    this.#entries.set(host, entry);
    this.#inFlight += 1;
    const done = (address: string | null, err: unknown): void => {
      this.#inFlight -= 1;
      entry.refreshing = false;
      if (address !== null) {
        entry.address = address;
        entry.expiresAt = this.#o.now() + DNS_TTL_MS;
      } else {
        entry.expiresAt = this.#o.now() + DNS_RETRY_MS;
        this.#o.failed(host, err);
      }
    };
    let pending: Promise<{ address: string }>;
    try {
      // dns.lookup throws, not rejects, on some names (a NUL byte): a datagram's name must not
      // throw out of the socket's handler.
      pending = this.#o.lookup(host);
    } catch (err) {
      done(null, err);
      return entry.address;
    }
    pending.then(
      (r) => done(r.address, null),
      (err: unknown) => done(null, err),
    );
    return entry.address;
  }
}
