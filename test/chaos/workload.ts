/**
 * The chaos workload: several concurrent clients, each with one call in flight, over a small
 * set of keys, through the project's gRPC API (test/support/grpc-client.ts: the proto, nothing
 * of the server's code), each call sent to a node picked at random. Every call is recorded with
 * its invocation and return times on the run's clock.
 *
 * Operations: Put, Put with an expected version (CAS), Delete, Delete with an expected version,
 * linearizable Get, serializable Get, and linearizable Scan pages over the run's key prefix.
 *
 * Keys rotate, as Jepsen's independent keys do: a slot retires its key after `opsPerKey`
 * operations and takes a fresh one, so that each key's history stays small enough for the
 * checker however long the run (an indeterminate write stays open to the end of its key's
 * history, and the search grows with the number of open writes).
 *
 * Outcomes, as the client library classifies them (src/client/client.ts):
 * - ok: the response (a failed precondition is a response too: precondition-failed, with the
 *   current version from `cairn-current-version`);
 * - fail: a write refused with a code that proves it was not applied (NOT_LEADER,
 *   SHUTTING_DOWN, PROPOSAL_LOST, PROPOSAL_DROPPED, BACKPRESSURE, NOT_MEMBER, SHARD_CREATION, or
 *   a connection never made),
 *   or a read that failed: left out of the history;
 * - info: a write whose outcome is unknown (a deadline, a broken connection, anything else):
 *   indeterminate, open-ended.
 */
import { status } from "@grpc/grpc-js";
import { CONNECT_FAILURE_DETAILS, SERVED_BY_KEY } from "../../src/api/wire.ts";
import type { Rng } from "../../src/common/index.ts";
import { grpcError, type Reply } from "../support/grpc-client.ts";
import type { RegisterInput, RegisterOutput, Version } from "../support/linearizability.ts";
import type { ChaosCluster } from "./cluster.ts";

export type OpKind =
  "put" | "put-if" | "delete" | "delete-if" | "get" | "get-serializable" | "scan";

export interface ScanPage {
  /** Keys strictly after this one (null: from the prefix's start). */
  readonly after: string | null;
  /** The page covers keys up to this one inclusive; null: to the end of the prefix. */
  readonly upTo: string | null;
  readonly items: readonly { key: string; value: string; version: Version }[];
  /** Keys in the active slots when the page was asked for (absent unless among the items). */
  readonly active: readonly string[];
}

export interface ChaosOp {
  readonly id: number;
  readonly client: number;
  readonly node: string;
  /** The node's process incarnation the call was sent to. */
  readonly incarnation: number;
  readonly kind: OpKind;
  /** null for a scan page. */
  readonly key: string | null;
  readonly input: RegisterInput | null;
  readonly invoke: number;
  returnTime: number | null;
  outcome: "ok" | "fail" | "info" | "pending";
  output: RegisterOutput | null;
  scan?: ScanPage;
  /**
   * A Get answered OK: the node that served it (its `cairn-served-by` trailer: the node called,
   * or the one the call was forwarded to) and that node's process incarnation. Absent when not
   * known for sure: no trailer, a node the harness does not know, or one that restarted while
   * the call was in flight.
   */
  served?: { readonly node: string; readonly incarnation: number };
  error?: string;
}

export interface WorkloadOptions {
  readonly clients: number;
  readonly keys: number;
  readonly opsPerKey: number;
  readonly prefix: string;
  readonly writeDeadlineMs: number;
  readonly readDeadlineMs: number;
  readonly scanLimit: number;
  /** Up to this many bytes of padding after each value's id, so that shards flush and compact. */
  readonly padding: number;
}

export const DEFAULT_WORKLOAD: WorkloadOptions = {
  clients: 6,
  keys: 6,
  opsPerKey: 400,
  prefix: "chaos/",
  writeDeadlineMs: 5_000,
  readDeadlineMs: 3_000,
  scanLimit: 3,
  padding: 1_500,
};

/** The value on the wire: the write's unique id, then padding the history does not keep. */
export function encodeValue(id: string, padding: number): Buffer {
  return Buffer.from(`${id}~${".".repeat(padding)}`);
}

/** The write's id from a value read back. */
export function decodeValue(value: Buffer): string {
  const text = value.toString();
  const at = text.indexOf("~");
  return at < 0 ? text : text.slice(0, at);
}

const WEIGHTS: readonly [OpKind, number][] = [
  ["put", 22],
  ["put-if", 16],
  ["delete", 6],
  ["delete-if", 4],
  ["get", 26],
  ["get-serializable", 16],
  ["scan", 6],
];

const NOT_APPLIED = new Set([
  "CAIRN_ERR_NOT_LEADER",
  "CAIRN_ERR_SHUTTING_DOWN",
  "CAIRN_ERR_PROPOSAL_LOST",
  "CAIRN_ERR_PROPOSAL_DROPPED",
  "CAIRN_ERR_BACKPRESSURE",
  // A node that is not an active member (joining, decommissioned) refuses before its store.
  "CAIRN_ERR_NOT_MEMBER",
  // The key's shard could not be created (its first request): nothing was proposed to it.
  "CAIRN_ERR_SHARD_CREATION",
]);

function pick<T>(rng: Rng, items: readonly T[]): T {
  return items[rng.int(items.length)] as T;
}

function pickKind(rng: Rng): OpKind {
  const total = WEIGHTS.reduce((a, [, w]) => a + w, 0);
  let r = rng.int(total);
  for (const [k, w] of WEIGHTS) {
    if (r < w) return k;
    r -= w;
  }
  return "get";
}

export function versionOf(v: unknown): Version | null {
  const o = v as { index?: number; term?: number } | null | undefined;
  const index = Number(o?.index ?? 0);
  const term = Number(o?.term ?? 0);
  return index === 0 && term === 0 ? null : { index, term };
}

function wireVersion(v: Version | null): { index: number; term: number } {
  return v === null ? { index: 0, term: 0 } : { index: v.index, term: v.term };
}

export function errorCode(err: unknown): string | undefined {
  const md = grpcError(err).metadata;
  const v = md?.get("cairn-error-code")[0];
  return v === undefined ? undefined : String(v);
}

function provablyNotApplied(err: unknown): boolean {
  const e = grpcError(err);
  const code = errorCode(err);
  if (code !== undefined) return NOT_APPLIED.has(code);
  return e.code === status.UNAVAILABLE && CONNECT_FAILURE_DETAILS.test(e.details ?? "");
}

function describeError(err: unknown): string {
  const e = grpcError(err);
  return `${e.code}${errorCode(err) === undefined ? "" : ` ${errorCode(err)}`}: ${e.details}`;
}

export class Workload {
  readonly ops: ChaosOp[] = [];
  /** Every key handed to a slot, with when it was. */
  readonly keys: string[] = [];
  readonly #options: WorkloadOptions;
  readonly #cluster: ChaosCluster;
  readonly #rng: Rng;
  readonly #now: () => number;
  readonly #slots: { key: string; ops: number }[] = [];
  #nextKey = 0;
  #running = false;
  #clients: Promise<void>[] = [];

  constructor(cluster: ChaosCluster, rng: Rng, now: () => number, options: WorkloadOptions) {
    this.#cluster = cluster;
    this.#rng = rng;
    this.#now = now;
    this.#options = options;
    for (let i = 0; i < options.keys; i++) this.#slots.push({ key: this.#freshKey(), ops: 0 });
  }

  #freshKey(): string {
    const key = `${this.#options.prefix}k${String(this.#nextKey++).padStart(4, "0")}`;
    this.keys.push(key);
    return key;
  }

  /** A key for the next operation; retires a slot's key after opsPerKey operations. */
  #key(): string {
    const slot = pick(this.#rng, this.#slots);
    if (++slot.ops > this.#options.opsPerKey) {
      slot.key = this.#freshKey();
      slot.ops = 1;
    }
    return slot.key;
  }

  start(): void {
    this.#running = true;
    this.#clients = Array.from({ length: this.#options.clients }, (_, c) =>
      this.#client(c, this.#rng.fork()),
    );
  }

  async stop(): Promise<void> {
    this.#running = false;
    await Promise.all(this.#clients);
  }

  async #client(c: number, rng: Rng): Promise<void> {
    /** The last version this client saw per key: what its CAS expects. */
    const seen = new Map<string, Version | null>();
    /** Nodes that just failed a call, and until when this client avoids them (mostly). */
    const suspect = new Map<string, number>();
    let seq = 0;
    while (this.#running) {
      // The members as they are now: a node that joined is asked, a retired one no more.
      const targets = this.#cluster.members().filter((n) => n.client !== null);
      if (targets.length === 0) {
        await new Promise((r) => setTimeout(r, 50));
        continue;
      }
      // Like a client library with a failure detector, a client mostly steers clear of a node
      // that just failed it for a while (so that a stalled node does not hold every client and
      // the availability figures are the cluster's); one call in ten goes anywhere regardless,
      // so that isolated and paused nodes keep being asked.
      const t = this.#now();
      const trusted = targets.filter((n) => (suspect.get(n.id) ?? 0) < t);
      const node = pick(rng, trusted.length > 0 && rng.float() < 0.9 ? trusted : targets);
      const kind = pickKind(rng);
      if (kind === "scan") {
        await this.#scan(c, node.id, node.incarnation, rng);
        continue;
      }
      const key = this.#key();
      const expected = rng.float() < 0.85 ? (seen.get(key) ?? null) : null;
      let input: RegisterInput;
      switch (kind) {
        case "put":
          input = { type: "put", value: `c${c}-${seq++}` };
          break;
        case "put-if":
          input = { type: "put-if", expected, value: `c${c}-${seq++}` };
          break;
        case "delete":
          input = { type: "delete" };
          break;
        case "delete-if":
          input = { type: "delete-if", expected };
          break;
        default:
          input = { type: "get" };
      }
      const op = this.#record(c, node.id, node.incarnation, kind, key, input);
      const client = node.client;
      if (client === null) {
        op.outcome = "fail";
        op.returnTime = this.#now();
        continue;
      }
      const k = Buffer.from(key);
      try {
        let res: Reply;
        switch (input.type) {
          case "put":
          case "put-if":
            res = await client.call(
              client.kv,
              "Put",
              {
                key: k,
                value: encodeValue(input.value, rng.int(this.#options.padding + 1)),
                ...(input.type === "put-if"
                  ? { expected_version: wireVersion(input.expected) }
                  : {}),
              },
              this.#options.writeDeadlineMs,
            );
            op.output = { type: "written", version: versionOf(res["version"]) as Version };
            break;
          case "delete":
          case "delete-if":
            res = await client.call(
              client.kv,
              "Delete",
              {
                key: k,
                ...(input.type === "delete-if"
                  ? { expected_version: wireVersion(input.expected) }
                  : {}),
              },
              this.#options.writeDeadlineMs,
            );
            op.output =
              res["deleted"] === true
                ? { type: "deleted", version: versionOf(res["version"]) as Version }
                : { type: "not-found" };
            break;
          case "get": {
            const before = this.#incarnations();
            const answer = await client.callWithTrailer(
              client.kv,
              "Get",
              { key: k, consistency: kind === "get" ? "LINEARIZABLE" : "SERIALIZABLE" },
              this.#options.readDeadlineMs,
            );
            res = answer.reply;
            const served = this.#served(op, answer.trailer.get(SERVED_BY_KEY)[0], before);
            if (served !== null) op.served = served;
            op.output =
              res["found"] === true
                ? {
                    type: "found",
                    value: decodeValue(res["value"] as Buffer),
                    version: versionOf(res["version"]) as Version,
                  }
                : { type: "absent" };
            break;
          }
        }
        op.returnTime = this.#now();
        op.outcome = "ok";
      } catch (err) {
        op.returnTime = this.#now();
        op.error = describeError(err);
        const e = grpcError(err);
        if (
          e.code === status.FAILED_PRECONDITION &&
          errorCode(err) === "CAIRN_ERR_VERSION_MISMATCH"
        ) {
          const cur = e.metadata?.get("cairn-current-version")[0];
          const m = cur === undefined ? null : /^(\d+)\/(\d+)$/.exec(String(cur));
          op.output = {
            type: "precondition-failed",
            current: m === null ? null : { index: Number(m[1]), term: Number(m[2]) },
          };
          op.outcome = "ok";
          delete op.error;
        } else if (e.code === status.INVALID_ARGUMENT) {
          throw new Error(`the workload sent an invalid request: ${op.error}`);
        } else if (input.type === "get" || provablyNotApplied(err)) {
          op.outcome = "fail";
        } else {
          op.outcome = "info";
        }
      }
      if (op.outcome === "ok" && op.output !== null) {
        const o = op.output;
        if (o.type === "written") seen.set(key, o.version);
        else if (o.type === "deleted" || o.type === "absent" || o.type === "not-found")
          seen.set(key, null);
        else if (o.type === "found") seen.set(key, o.version);
        else if (o.type === "precondition-failed") seen.set(key, o.current);
      } else if (op.outcome === "info") {
        seen.delete(key);
      }
      if (op.outcome !== "ok") {
        suspect.set(node.id, this.#now() + 2_000);
        await new Promise((r) => setTimeout(r, 10 + rng.int(40)));
      }
    }
  }

  /** Every node's process incarnation now. */
  #incarnations(): Map<string, number> {
    return new Map(this.#cluster.nodes.map((n) => [n.id, n.incarnation]));
  }

  /**
   * The node that served `op` and its incarnation, from the answer's `cairn-served-by`; null
   * unless sure: the node is known and was the same process when the call was sent (`before`)
   * as now. The node called is the process the call was sent to (a restart breaks the call).
   */
  #served(
    op: ChaosOp,
    servedBy: string | Buffer | undefined,
    before: ReadonlyMap<string, number>,
  ): { node: string; incarnation: number } | null {
    if (typeof servedBy !== "string") return null;
    if (servedBy === op.node) return { node: op.node, incarnation: op.incarnation };
    const then = before.get(servedBy);
    const now = this.#cluster.nodes.find((n) => n.id === servedBy)?.incarnation;
    return then === undefined || then !== now ? null : { node: servedBy, incarnation: now };
  }

  #record(
    client: number,
    node: string,
    incarnation: number,
    kind: OpKind,
    key: string | null,
    input: RegisterInput | null,
  ): ChaosOp {
    const op: ChaosOp = {
      id: this.ops.length,
      client,
      node,
      incarnation,
      kind,
      key,
      input,
      invoke: this.#now(),
      returnTime: null,
      outcome: "pending",
      output: null,
    };
    this.ops.push(op);
    return op;
  }

  /** A scan of the run's prefix, page after page (each page an operation of its own). */
  async #scan(c: number, nodeId: string, incarnation: number, rng: Rng): Promise<void> {
    let token: Buffer = Buffer.alloc(0);
    let after: string | null = null;
    const pages = 1 + rng.int(3);
    for (let p = 0; p < pages && this.#running; p++) {
      const node = this.#cluster.node(nodeId);
      const client = node.client;
      if (client === null || node.incarnation !== incarnation) return;
      const active = this.#slots.map((s) => s.key);
      const op = this.#record(c, nodeId, incarnation, "scan", null, null);
      try {
        const res = await client.call(
          client.kv,
          "Scan",
          {
            prefix: Buffer.from(this.#options.prefix),
            limit: this.#options.scanLimit,
            page_token: token,
            consistency: "LINEARIZABLE",
          },
          this.#options.readDeadlineMs,
        );
        op.returnTime = this.#now();
        op.outcome = "ok";
        const items = (res["items"] as Reply[]).map((it) => ({
          key: (it["key"] as Buffer).toString(),
          value: decodeValue(it["value"] as Buffer),
          version: versionOf(it["version"]) as Version,
        }));
        token = res["next_page_token"] as Buffer;
        // An empty page that is not the last covers nothing ("" sorts before every key).
        const upTo = token.length === 0 ? null : (items.at(-1)?.key ?? "");
        op.scan = { after, upTo, items, active };
        if (token.length === 0 || items.length === 0) return;
        after = upTo;
      } catch (err) {
        op.returnTime = this.#now();
        op.outcome = "fail";
        op.error = describeError(err);
        return;
      }
    }
  }
}
