/**
 * A lock-step network for core unit tests: every datagram goes through the real codec and is
 * delivered at once unless a filter drops it. Crashed members neither tick nor receive.
 */
import assert from "node:assert/strict";
import { seededRng } from "../../src/common/index.ts";
import {
  decodeMessage,
  encodeMessage,
  type MemberEvent,
  memberId,
  type MemberMeta,
  type DuplicateNodeIdError,
  type ShardCountMismatchError,
  Swim,
  type SwimConfig,
} from "../../src/membership/core/index.ts";

export function metaOf(name: string, totalShards = 1024): MemberMeta {
  return {
    id: memberId(name),
    rpcAddr: `${name}.test:7447`,
    httpAddr: `${name}.test:8080`,
    totalShards,
  };
}

export class TinyNet {
  readonly members = new Map<string, Swim>();
  readonly events = new Map<string, MemberEvent[]>();
  readonly errors = new Map<string, (ShardCountMismatchError | DuplicateNodeIdError)[]>();
  readonly crashed = new Set<string>();
  /** Return true to drop the datagram. */
  drop: (from: string, to: string) => boolean = () => false;
  #seed: number;
  readonly #config: Partial<SwimConfig>;

  constructor(seed: number, config: Partial<SwimConfig> = {}) {
    this.#seed = seed;
    this.#config = config;
  }

  /**
   * Adds member `name` at `<name>.test:7447`, with node id `id` (default: its name), starting at
   * incarnation `startAt` (default 0).
   */
  add(name: string, totalShards = 1024, id = name, startAt = 0): Swim {
    const swim = new Swim({
      self: { ...metaOf(name, totalShards), id: memberId(id) },
      rng: seededRng(this.#seed++),
      config: this.#config,
      incarnation: startAt,
    });
    this.members.set(name, swim);
    this.events.set(name, []);
    this.errors.set(name, []);
    this.crashed.delete(name);
    return swim;
  }

  get(name: string): Swim {
    const s = this.members.get(name);
    assert.ok(s !== undefined, `no member ${name}`);
    return s;
  }

  /** Delivers everything pending, transitively, until the network is quiet. */
  flush(): void {
    for (let round = 0; round < 1000; round++) {
      let moved = false;
      for (const [name, swim] of this.members) {
        const ready = swim.takeReady();
        this.events.get(name)?.push(...ready.events);
        this.errors.get(name)?.push(...ready.errors);
        for (const out of ready.messages) {
          moved = true;
          const bytes = encodeMessage(out.message);
          const decoded = decodeMessage(bytes);
          assert.ok(decoded.ok);
          const to = out.to.replace(/\.test:7447$/, "");
          if (this.crashed.has(to) || this.drop(name, to)) continue;
          this.members.get(to)?.handle(`${name}.test:7447`, decoded.message);
        }
      }
      if (!moved) return;
    }
    assert.fail("network did not go quiet");
  }

  tick(n = 1): void {
    for (let i = 0; i < n; i++) {
      for (const [name, swim] of this.members) if (!this.crashed.has(name)) swim.tick();
      this.flush();
    }
  }

  /** `observer`'s view of `member`: "alive", "suspect", "dead", "left" or "unknown". */
  stateOf(observer: string, member: string): string {
    return this.get(observer).member(memberId(member))?.state ?? "unknown";
  }

  kinds(observer: string, member: string): string[] {
    return (this.events.get(observer) ?? [])
      .filter((e) => e.member.meta.id === member)
      .map((e) => e.kind);
  }
}

/** A TinyNet of `names`, each joined through the first, every one seeing every other alive. */
export function cluster(names: string[], seed = 1): TinyNet {
  const net = new TinyNet(seed);
  for (const n of names) net.add(n);
  const [first, ...rest] = names;
  for (const n of rest) net.get(n).join([`${first}.test:7447`]);
  net.flush();
  net.tick(50);
  for (const a of names) {
    for (const b of names) if (a !== b) assert.equal(net.stateOf(a, b), "alive", `${a} sees ${b}`);
  }
  return net;
}
