/**
 * A deterministic simulation of a SWIM cluster: real cores, the real codec, a simulated network
 * with loss, delay and partitions, members that pause, crash and restart. One seed replays one
 * run exactly. Time is simulated milliseconds; each member ticks every tickMs.
 *
 * Checked while it runs (each failure is a violation, with the time and the members involved):
 * - no member declares a live member dead (a member counts as live while paused) unless the two
 *   were separated by a partition or the member crashed within the last VERDICT_WINDOW_MS;
 * - an observer's incarnation for a member never decreases while it remembers the member;
 * - a crash is seen as dead by every other member within DETECTION_LIMIT_MS;
 * - after a partition heals, every member sees every other as alive within HEAL_LIMIT_MS;
 * - after bootstrap and after a restart the cluster converges; every datagram fits the bound.
 */
import { seededRng, type Rng } from "../../common/index.ts";
import {
  decodeMessage,
  describeMessage,
  encodeMessage,
  MAX_MESSAGE_BYTES,
  type MemberEvent,
  type MemberId,
  memberId,
  Swim,
  type SwimConfig,
} from "../core/index.ts";
import { EventQueue } from "./event-queue.ts";

export type Scenario = "crash" | "partition" | "soak" | "mixed";
export const SCENARIOS: readonly Scenario[] = ["crash", "partition", "soak", "mixed"];

export interface SimOptions {
  readonly seed: number;
  readonly members: number;
  readonly scenario: Scenario;
  /** Simulated minutes after the cluster has formed. */
  readonly minutes: number;
  /** Probability that a datagram is lost, 0..1. */
  readonly loss: number;
  readonly minDelayMs?: number;
  readonly maxDelayMs?: number;
  readonly tickMs?: number;
  readonly config?: Partial<SwimConfig>;
  /** Receives one line per membership event (and per datagram with traceMessages). */
  readonly trace?: (line: string) => void;
  readonly traceMessages?: boolean;
}

export interface SimResult {
  readonly violations: string[];
  /** Per crash: ms until every other member had declared it dead. */
  readonly detectionsMs: number[];
  /** Per healed partition: ms until every member saw every other alive. */
  readonly healConvergenceMs: number[];
  /** Per restart: ms until every member saw the restarted member alive again. */
  readonly rejoinMs: number[];
  /** Ms from the first start until every member saw every other alive. */
  bootstrapMs: number | null;
  falsePositives: number;
  crashes: number;
  partitions: number;
  pauses: number;
  datagrams: number;
  bytes: number;
  maxDatagramBytes: number;
  simulatedMs: number;
}

export const DETECTION_LIMIT_MS = 60_000;
export const HEAL_LIMIT_MS = 10_000;
export const CONVERGENCE_LIMIT_MS = 60_000;
/** A dead verdict this soon after a crash or a partition is explained by it. */
export const VERDICT_WINDOW_MS = 120_000;
const PAUSE_EVERY_MS = 60_000;
const PAUSE_FOR_MS = 1_500;
const INBOX_LIMIT = 1_000;

interface SimNode {
  readonly index: number;
  readonly id: MemberId;
  readonly addr: string;
  swim: Swim | null;
  generation: number;
  pausedUntil: number;
  inbox: { from: string; bytes: Uint8Array }[];
  /** This observer's highest incarnation seen per member, for the monotonicity check. */
  lastIncarnation: Map<MemberId, number>;
  side: number;
  crashedAt: number;
}

type SimEvent =
  | { readonly kind: "tick"; readonly node: number; readonly generation: number }
  | {
      readonly kind: "deliver";
      readonly node: number;
      readonly from: string;
      readonly bytes: Uint8Array;
    }
  | { readonly kind: "resume"; readonly node: number }
  | {
      readonly kind: "join-retry";
      readonly node: number;
      readonly generation: number;
      readonly backoffMs: number;
    }
  | { readonly kind: "control" }
  | { readonly kind: "pause" };

type Phase =
  | { readonly kind: "bootstrap" }
  | { readonly kind: "idle"; readonly until: number }
  | {
      readonly kind: "detecting";
      readonly node: number;
      readonly since: number;
      readonly waiting: Set<number>;
    }
  | { readonly kind: "down"; readonly node: number; readonly until: number }
  | { readonly kind: "rejoining"; readonly node: number; readonly since: number }
  | { readonly kind: "partitioned"; readonly until: number }
  | { readonly kind: "healing"; readonly since: number; late: boolean };

const CONTROL_EVERY_MS = 100;

export function runSimulation(options: SimOptions): SimResult {
  return new Simulation(options).run();
}

class Simulation {
  readonly #o: SimOptions;
  readonly #rng: Rng;
  readonly #netRng: Rng;
  readonly #nodes: SimNode[] = [];
  readonly #byAddr = new Map<string, SimNode>();
  readonly #byId = new Map<MemberId, SimNode>();
  readonly #queue = new EventQueue<SimEvent>();
  readonly #tickMs: number;
  readonly #minDelay: number;
  readonly #maxDelay: number;
  #now = 0;
  #end = Number.POSITIVE_INFINITY;
  #phase: Phase = { kind: "bootstrap" };
  #partitioned = false;
  #lastHealAt = Number.NEGATIVE_INFINITY;
  #lastScan = 0;
  readonly #result: SimResult = {
    violations: [],
    detectionsMs: [],
    healConvergenceMs: [],
    rejoinMs: [],
    bootstrapMs: null,
    falsePositives: 0,
    crashes: 0,
    partitions: 0,
    pauses: 0,
    datagrams: 0,
    bytes: 0,
    maxDatagramBytes: 0,
    simulatedMs: 0,
  };

  constructor(options: SimOptions) {
    this.#o = options;
    this.#rng = seededRng(options.seed);
    this.#netRng = this.#rng.fork();
    this.#tickMs = options.tickMs ?? 100;
    this.#minDelay = options.minDelayMs ?? 1;
    this.#maxDelay = options.maxDelayMs ?? 10;
    for (let i = 0; i < options.members; i++) {
      const node: SimNode = {
        index: i,
        id: memberId(`n${i}`),
        addr: `10.0.${i >> 8}.${i & 255}:7447`,
        swim: null,
        generation: 0,
        pausedUntil: 0,
        inbox: [],
        lastIncarnation: new Map(),
        side: 0,
        crashedAt: Number.NEGATIVE_INFINITY,
      };
      this.#nodes.push(node);
      this.#byAddr.set(node.addr, node);
      this.#byId.set(node.id, node);
    }
  }

  run(): SimResult {
    this.#start(this.#node(0), []);
    for (let i = 1; i < this.#nodes.length; i++) {
      this.#queue.push(this.#rng.int(2000), {
        kind: "join-retry",
        node: i,
        generation: -1,
        backoffMs: 500,
      });
    }
    this.#queue.push(CONTROL_EVERY_MS, { kind: "control" });
    if (this.#o.scenario === "soak" || this.#o.scenario === "mixed") {
      this.#queue.push(PAUSE_EVERY_MS, { kind: "pause" });
    }
    for (;;) {
      const next = this.#queue.pop();
      if (next === undefined || next.at > this.#end) break;
      this.#now = next.at;
      this.#step(next.value);
      if (this.#result.violations.length > 50) break;
    }
    this.#result.simulatedMs = Math.min(this.#now, this.#end);
    return this.#result;
  }

  #node(i: number): SimNode {
    const n = this.#nodes[i];
    if (n === undefined) throw new RangeError(`no node ${i}`);
    return n;
  }

  #violation(what: string): void {
    this.#result.violations.push(`t=${(this.#now / 1000).toFixed(3)}s ${what}`);
  }

  #trace(line: string): void {
    this.#o.trace?.(`t=${(this.#now / 1000).toFixed(3)}s ${line}`);
  }

  // ---- members ------------------------------------------------------------------------------

  #start(node: SimNode, seeds: readonly string[]): void {
    node.generation += 1;
    node.pausedUntil = 0;
    node.inbox = [];
    node.lastIncarnation = new Map();
    node.swim = new Swim({
      self: {
        id: node.id,
        rpcAddr: node.addr,
        httpAddr: node.addr.replace(/7447$/, "8080"),
        totalShards: 1024,
      },
      rng: this.#rng.fork(),
      ...(this.#o.config === undefined ? {} : { config: this.#o.config }),
    });
    this.#trace(`${node.id} starts`);
    this.#queue.push(this.#now + this.#rng.int(this.#tickMs) + 1, {
      kind: "tick",
      node: node.index,
      generation: node.generation,
    });
    if (seeds.length > 0) {
      node.swim.join(seeds);
      this.#drain(node);
      this.#queue.push(this.#now + 1000, {
        kind: "join-retry",
        node: node.index,
        generation: node.generation,
        backoffMs: 2000,
      });
    }
  }

  #crash(node: SimNode): void {
    node.swim = null;
    node.crashedAt = this.#now;
    node.inbox = [];
    this.#result.crashes += 1;
    this.#trace(`${node.id} crashes`);
  }

  #isUp(node: SimNode): boolean {
    return node.swim !== null;
  }

  #isPaused(node: SimNode): boolean {
    return this.#now < node.pausedUntil;
  }

  #step(e: SimEvent): void {
    switch (e.kind) {
      case "tick": {
        const node = this.#node(e.node);
        if (node.swim === null || node.generation !== e.generation) return;
        if (!this.#isPaused(node)) {
          node.swim.tick();
          this.#drain(node);
        }
        this.#queue.push(this.#now + this.#tickMs, e);
        return;
      }
      case "deliver": {
        const node = this.#node(e.node);
        if (node.swim === null) return;
        if (this.#isPaused(node)) {
          if (node.inbox.length < INBOX_LIMIT) node.inbox.push({ from: e.from, bytes: e.bytes });
          return;
        }
        this.#receive(node, e.from, e.bytes);
        return;
      }
      case "resume": {
        const node = this.#node(e.node);
        const inbox = node.inbox;
        node.inbox = [];
        for (const d of inbox) this.#receive(node, d.from, d.bytes);
        return;
      }
      case "join-retry": {
        const node = this.#node(e.node);
        if (e.generation === -1) {
          // First start of a non-seed member: join through the seed.
          this.#start(node, [this.#node(0).addr]);
          return;
        }
        if (node.swim === null || node.generation !== e.generation) return;
        if (node.swim.pushPullReplies > 0) return;
        node.swim.join(this.#seedsFor(node));
        this.#drain(node);
        this.#queue.push(this.#now + e.backoffMs, {
          ...e,
          backoffMs: Math.min(e.backoffMs * 2, 8000),
        });
        return;
      }
      case "pause": {
        this.#queue.push(this.#now + PAUSE_EVERY_MS, e);
        const candidates = this.#nodes.filter((n) => this.#isUp(n) && !this.#isPaused(n));
        const node = candidates[this.#rng.int(Math.max(1, candidates.length))];
        if (node === undefined) return;
        node.pausedUntil = this.#now + PAUSE_FOR_MS;
        this.#result.pauses += 1;
        this.#trace(`${node.id} pauses for ${PAUSE_FOR_MS} ms`);
        this.#queue.push(node.pausedUntil, { kind: "resume", node: node.index });
        return;
      }
      case "control":
        this.#queue.push(this.#now + CONTROL_EVERY_MS, e);
        this.#direct();
        return;
    }
  }

  #seedsFor(node: SimNode): string[] {
    return [this.#node(0).addr, this.#node(1 % this.#nodes.length).addr].filter(
      (a) => a !== node.addr,
    );
  }

  #receive(node: SimNode, from: string, bytes: Uint8Array): void {
    const swim = node.swim;
    if (swim === null) return;
    const decoded = decodeMessage(bytes);
    if (!decoded.ok) {
      this.#violation(`${node.id} could not decode a datagram: ${decoded.reason}`);
      return;
    }
    swim.handle(from, decoded.message);
    this.#drain(node);
  }

  /** Sends what a member's core asks for and checks what it reports. */
  #drain(node: SimNode): void {
    const swim = node.swim;
    if (swim === null) return;
    const ready = swim.takeReady();
    for (const out of ready.messages) {
      const bytes = encodeMessage(out.message);
      this.#result.datagrams += 1;
      this.#result.bytes += bytes.length;
      this.#result.maxDatagramBytes = Math.max(this.#result.maxDatagramBytes, bytes.length);
      if (bytes.length > MAX_MESSAGE_BYTES)
        this.#violation(`${node.id} sent ${bytes.length} bytes`);
      if (this.#o.traceMessages === true)
        this.#trace(`${node.id} → ${out.to}: ${describeMessage(out.message)}`);
      const dest = this.#byAddr.get(out.to);
      if (dest === undefined) continue;
      if (this.#partitioned && dest.side !== node.side) continue;
      if (this.#netRng.float() < this.#o.loss) continue;
      const delay = this.#minDelay + this.#netRng.float() * (this.#maxDelay - this.#minDelay);
      this.#queue.push(this.#now + delay, {
        kind: "deliver",
        node: dest.index,
        from: node.addr,
        bytes,
      });
    }
    for (const e of ready.events) this.#observe(node, e);
    for (const err of ready.errors) this.#violation(`${node.id}: ${err.message}`);
  }

  #observe(observer: SimNode, e: MemberEvent): void {
    const id = e.member.meta.id;
    this.#trace(`${observer.id} sees ${e.kind} ${id}@${e.member.incarnation}`);
    const last = observer.lastIncarnation.get(id);
    if (e.kind !== "joined" && last !== undefined && e.member.incarnation < last) {
      this.#violation(
        `${observer.id}'s incarnation of ${id} went from ${last} to ${e.member.incarnation}`,
      );
    }
    observer.lastIncarnation.set(id, e.member.incarnation);
    if (e.kind !== "dead") return;
    const subject = this.#byId.get(id);
    if (subject === undefined) return;
    if (!this.#isExplainedDeath(subject)) {
      this.#result.falsePositives += 1;
      this.#violation(
        `false positive: ${observer.id} declared ${id} dead while it was live` +
          (this.#isPaused(subject) ? " (paused)" : ""),
      );
    }
    const phase = this.#phase;
    if (phase.kind === "detecting" && phase.node === subject.index)
      phase.waiting.delete(observer.index);
  }

  /**
   * A verdict is explained by a crash of the subject, or by a partition: one side declares the
   * other dead, and those verdicts, still queued for gossip, cross over when the partition heals
   * (the subject then refutes). Only in a run without recent crash or partition is it false.
   */
  #isExplainedDeath(subject: SimNode): boolean {
    if (!this.#isUp(subject)) return true;
    if (this.#now - subject.crashedAt <= VERDICT_WINDOW_MS) return true;
    return this.#partitioned || this.#now - this.#lastHealAt <= VERDICT_WINDOW_MS;
  }

  /** Checks that no observer's view of a member went back in incarnation. */
  #scanIncarnations(): void {
    for (const node of this.#nodes) {
      const swim = node.swim;
      if (swim === null) continue;
      const seen = new Set<MemberId>();
      for (const view of swim.members()) {
        const id = view.meta.id;
        if (id === node.id) continue;
        seen.add(id);
        const last = node.lastIncarnation.get(id);
        if (last !== undefined && view.incarnation < last) {
          this.#violation(
            `${node.id}'s incarnation of ${id} went from ${last} to ${view.incarnation}`,
          );
        }
        node.lastIncarnation.set(id, view.incarnation);
      }
      for (const id of [...node.lastIncarnation.keys()])
        if (!seen.has(id)) node.lastIncarnation.delete(id);
    }
  }

  /**
   * Every live member sees every other live member alive (with `knownOnly`: alive or suspect,
   * i.e. the member list is complete; under heavy loss some member is nearly always suspected
   * somewhere), and no crashed one as live.
   */
  #isConverged(knownOnly = false): boolean {
    return this.#divergences(knownOnly, 1).length === 0;
  }

  /** Up to `limit` views that keep the cluster from being converged, e.g. `n1 sees n4 dead@3`. */
  #divergences(knownOnly: boolean, limit: number): string[] {
    const out: string[] = [];
    for (const o of this.#nodes) {
      const swim = o.swim;
      if (swim === null) continue;
      for (const x of this.#nodes) {
        if (x === o) continue;
        const view = swim.member(x.id);
        const state = view?.state;
        const live = state === "alive" || state === "suspect";
        if (this.#isUp(x) ? !(state === "alive" || (knownOnly && live)) : live) {
          out.push(`${o.id} sees ${x.id} ${state ?? "unknown"}@${view?.incarnation ?? "-"}`);
          if (out.length >= limit) return out;
        }
      }
    }
    return out;
  }

  // ---- the director ---------------------------------------------------------------------------

  #idle(): void {
    this.#phase = { kind: "idle", until: this.#now + 5_000 + this.#rng.int(10_000) };
  }

  #direct(): void {
    const scanEvery = this.#nodes.length > 30 ? 5_000 : 1_000;
    if (this.#now - this.#lastScan >= scanEvery) {
      this.#lastScan = this.#now;
      this.#scanIncarnations();
    }
    const phase = this.#phase;
    switch (phase.kind) {
      case "bootstrap":
        // Formed once every member has started and every member knows every other.
        if (this.#nodes.every((n) => this.#isUp(n)) && this.#isConverged(true)) {
          this.#result.bootstrapMs = this.#now;
          this.#end = this.#now + this.#o.minutes * 60_000;
          this.#trace(`cluster formed in ${this.#now} ms`);
          this.#idle();
        } else if (this.#now > CONVERGENCE_LIMIT_MS) {
          this.#violation(`the cluster did not form within ${CONVERGENCE_LIMIT_MS} ms`);
          this.#end = this.#now;
        }
        return;
      case "idle":
        if (this.#now < phase.until) return;
        this.#act();
        return;
      case "detecting":
        for (const i of [...phase.waiting]) if (!this.#isUp(this.#node(i))) phase.waiting.delete(i);
        if (phase.waiting.size === 0) {
          this.#result.detectionsMs.push(this.#now - phase.since);
          this.#phase = {
            kind: "down",
            node: phase.node,
            until: this.#now + 3_000 + this.#rng.int(5_000),
          };
        } else if (this.#now - phase.since > DETECTION_LIMIT_MS) {
          const names = [...phase.waiting].map((i) => this.#node(i).id).join(", ");
          this.#violation(
            `n${phase.node} crashed ${DETECTION_LIMIT_MS} ms ago; still live for ${names}`,
          );
          this.#phase = { kind: "down", node: phase.node, until: this.#now };
        }
        return;
      case "down":
        if (this.#now < phase.until) return;
        this.#start(this.#node(phase.node), this.#seedsFor(this.#node(phase.node)));
        this.#phase = { kind: "rejoining", node: phase.node, since: this.#now };
        return;
      case "rejoining":
        if (this.#isConverged()) {
          this.#result.rejoinMs.push(this.#now - phase.since);
          this.#idle();
        } else if (this.#now - phase.since > CONVERGENCE_LIMIT_MS) {
          this.#violation(
            `n${phase.node} restarted ${CONVERGENCE_LIMIT_MS} ms ago; no convergence`,
          );
          this.#idle();
        }
        return;
      case "partitioned":
        if (this.#now < phase.until) return;
        this.#heal();
        this.#phase = { kind: "healing", since: this.#now, late: false };
        return;
      case "healing":
        if (this.#isConverged()) {
          this.#result.healConvergenceMs.push(this.#now - phase.since);
          this.#idle();
        } else if (this.#now - phase.since > HEAL_LIMIT_MS && !phase.late) {
          phase.late = true;
          this.#violation(
            `no convergence within ${HEAL_LIMIT_MS} ms after the partition healed: ` +
              this.#divergences(false, 5).join(", "),
          );
        } else if (this.#now - phase.since > CONVERGENCE_LIMIT_MS) {
          this.#violation(`no convergence within ${CONVERGENCE_LIMIT_MS} ms after the heal`);
          this.#idle();
        }
        return;
    }
  }

  #act(): void {
    const scenario = this.#o.scenario;
    switch (scenario) {
      case "soak":
        this.#idle();
        return;
      case "crash":
        this.#crashOne();
        return;
      case "partition":
        this.#partition();
        return;
      case "mixed":
        if (this.#rng.int(2) === 0) this.#crashOne();
        else this.#partition();
        return;
    }
  }

  #crashOne(): void {
    const node = this.#node(this.#rng.int(this.#nodes.length));
    this.#crash(node);
    const waiting = new Set(
      this.#nodes.filter((n) => n !== node && this.#isUp(n)).map((n) => n.index),
    );
    this.#phase = { kind: "detecting", node: node.index, since: this.#now, waiting };
  }

  #partition(): void {
    if (this.#nodes.length < 2) return this.#idle();
    // Two non-empty sides; each member lands on a side at random.
    const sides = this.#nodes.map(() => this.#rng.int(2));
    sides[0] = 0;
    sides[1] = 1;
    this.#nodes.forEach((n, i) => (n.side = sides[i] ?? 0));
    this.#partitioned = true;
    this.#result.partitions += 1;
    const forMs = 20_000 + this.#rng.int(20_000);
    this.#trace(
      `partition for ${forMs} ms: ${this.#nodes
        .filter((n) => n.side === 1)
        .map((n) => n.id)
        .join(" ")} apart`,
    );
    this.#phase = { kind: "partitioned", until: this.#now + forMs };
  }

  #heal(): void {
    this.#lastHealAt = this.#now;
    for (const n of this.#nodes) n.side = 0;
    this.#partitioned = false;
    this.#trace("partition heals");
  }
}
