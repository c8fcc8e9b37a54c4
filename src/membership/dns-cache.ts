/**
 * The addresses SWIM sends to, for members named by host name: the result of a lookup, looked
 * up again in the background once it is DNS_TTL_MS old. Until the first lookup returns, the host
 * name itself is used (dgram resolves it for that datagram).
 */

/** How long a looked-up address is used before it is looked up again. */
export const DNS_TTL_MS = 30_000;

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
  /** A lookup that failed (logged by the caller). */
  readonly failed: (host: string, err: unknown) => void;
  /** Milliseconds, monotonic. */
  readonly now: () => number;
}

export class DnsCache {
  readonly #o: DnsCacheOptions;
  readonly #entries = new Map<
    string,
    { address: string; expiresAt: number; refreshing: boolean }
  >();

  constructor(options: DnsCacheOptions) {
    this.#o = options;
  }

  /** Host names remembered. */
  get size(): number {
    return this.#entries.size;
  }

  /** The address to send to for `host` now (itself until a lookup returned). */
  addressOf(host: string): string {
    const now = this.#o.now();
    const cached = this.#entries.get(host);
    if (cached === undefined || (cached.expiresAt <= now && !cached.refreshing)) {
      const entry = {
        address: cached?.address ?? host,
        expiresAt: now + DNS_TTL_MS,
        refreshing: true,
      };
      // Re-inserted at the end: the map is in the order the names were last looked up.
      this.#entries.delete(host);
      if (this.#entries.size >= MAX_DNS_ENTRIES) {
        const oldest = this.#entries.keys().next();
        if (oldest.done !== true) this.#entries.delete(oldest.value);
      }
      this.#entries.set(host, entry);
      this.#o.lookup(host).then(
        (r) => {
          entry.address = r.address;
          entry.refreshing = false;
        },
        (err: unknown) => {
          entry.refreshing = false;
          this.#o.failed(host, err);
        },
      );
    }
    return (cached ?? this.#entries.get(host))?.address ?? host;
  }
}
