/**
 * Keeps the node's table of its members' addresses (ConnectionSlots.setMembers, the members'
 * reserve of `rpc.max_connections`) up to date with the meta state. The meta state records each
 * member's advertised `rpc_addr`, whose host may be a DNS name (Kubernetes: a pod's stable name,
 * whose IP changes when the pod is replaced); a connection's remoteAddress is an IP. Names are
 * looked up again when the members change, or at most every RESOLVE_EVERY_MS when they do not
 * (the node publishes its members on every gossip event), one update at a time (the newest
 * wins); a name that does not resolve keeps what it resolved to before, or nothing.
 */
import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import type { ConnectionSlots } from "../api/connection-slots.ts";
import { parseHostPort } from "../config/index.ts";

/** A name's IP addresses (every family). */
export type Resolve = (host: string) => Promise<string[]>;

/** How long the same members' names are not looked up again. */
export const RESOLVE_EVERY_MS = 5000;

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

  /** The hosts of the last update asked for, and when. */
  #asked = "";
  #askedAt = -Infinity;
  readonly #now: () => number;

  constructor(
    slots: ConnectionSlots,
    resolve: Resolve = resolveAll,
    now: () => number = () => performance.now(),
  ) {
    this.#slots = slots;
    this.#resolve = resolve;
    this.#now = now;
  }

  /**
   * The members' `rpc_addr`s (`host:port`), as the meta state records them. Returns the update's
   * promise (the tests wait for it); it never rejects.
   */
  update(rpcAddrs: readonly string[]): Promise<void> {
    const hosts = [
      ...new Set(
        rpcAddrs.flatMap((a) => {
          const parsed = parseHostPort(a);
          return parsed.ok ? [parsed.value.host] : [];
        }),
      ),
    ].sort();
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
        const addresses = await Promise.all(hosts.map((h) => this.#addressesOf(h)));
        // A name no member has any more is forgotten.
        for (const name of this.#resolved.keys()) {
          if (!hosts.includes(name)) this.#resolved.delete(name);
        }
        const key = addresses.flat().sort().join(" ");
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
    try {
      const found = await this.#resolve(host);
      this.#resolved.set(host, found);
      return found;
    } catch {
      return this.#resolved.get(host) ?? [];
    }
  }
}
