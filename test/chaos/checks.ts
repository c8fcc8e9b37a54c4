/**
 * What a chaos run's history must satisfy.
 *
 * **Linearizable operations** (Put, Put with an expected version, Delete, Delete with an expected
 * version, linearizable Get, linearizable Scan pages) go to the shared checker
 * (test/support/linearizability.ts: per-key register with versions and CAS, Porcupine-style
 * search, indeterminate operations open-ended). A Scan page is a read of every key it covers at
 * one point between its invocation and its return: each key it returns is a `get` that found the
 * item, and each key of the active slots inside the page's range that it does not return is a
 * `get` that found nothing. Writes that failed with a code proving they were not applied, and
 * reads that failed, are left out; writes with an unknown outcome are indeterminate.
 *
 * **Serializable Gets** read the local replica and may be stale, so they are not linearizable
 * and are kept out of that check. They are checked for what they do promise (a replica's state
 * is a prefix of the shard's log, applied in order): the value read was written by some write
 * invoked before the read returned, with the version that write got (when it answered), never by
 * a write reported not applied; one value is only ever seen with one version; and on one node
 * process, reads of a key that do not overlap never go back to an older version. "One node" is
 * the node that served the read (its `cairn-served-by` trailer, ChaosOp.served), not the node
 * called: a node that holds no replica of the key's shard (its replica moved away) forwards
 * the read, and the node that answers may be behind the one called (docs/operations.md). A read
 * whose serving node is not known is left out of that check (and only of that one).
 *
 * **Placement** (after the heal, from every remaining member's cluster view): every shard has
 * exactly the replication factor of replicas (the meta group, shard 0, from the factor to the
 * number of members it was founded on: it keeps its founding voters, and shrinks toward the
 * factor only when a member is lost and none can take its place; src/cluster/allocator.ts), on
 * distinct members that are all `active`; the
 * members of a shard's group name the same replicas (no shard has two groups); and no move is
 * under way (the replicas the meta group counts on each member are the groups it is a voter
 * of). A shard's group is what its latest leader says (the view, at the highest term, of a node
 * that leads it): a replica moved away stays on its old node, dormant, and that node's view may
 * still name the group it left, which is not a second group.
 */
import { nodeOfReplica } from "../../src/cluster/index.ts";
import {
  checkRegisterHistory,
  compareVersions,
  type CheckResult,
  describeRegisterOp,
  type RegisterOp,
  type Version,
} from "../support/linearizability.ts";
import type { ChaosOp } from "./workload.ts";

export function toRegisterHistory(ops: readonly ChaosOp[], prefix: string): RegisterOp[] {
  const out: RegisterOp[] = [];
  for (const op of ops) {
    if (op.kind === "get-serializable" || op.outcome === "fail") continue;
    if (op.kind === "scan") {
      const page = op.scan;
      if (op.outcome !== "ok" || page === undefined) continue;
      const returned = new Map(page.items.map((it) => [it.key, it]));
      const covered = (k: string): boolean =>
        k.startsWith(prefix) &&
        (page.after === null || k > page.after) &&
        (page.upTo === null || k <= page.upTo);
      const keys = new Set([...page.items.map((it) => it.key), ...page.active.filter(covered)]);
      for (const key of keys) {
        const it = returned.get(key);
        out.push({
          client: `c${op.client}/scan`,
          key,
          invokeTime: op.invoke,
          returnTime: op.returnTime,
          input: { type: "get" },
          output:
            it === undefined
              ? { type: "absent" }
              : { type: "found", value: it.value, version: it.version },
        });
      }
      continue;
    }
    if (op.key === null || op.input === null) continue;
    const determinate = op.outcome === "ok";
    out.push({
      client: `c${op.client}@${op.node}`,
      key: op.key,
      invokeTime: op.invoke,
      returnTime: determinate ? op.returnTime : null,
      input: op.input,
      output: determinate ? op.output : null,
    });
  }
  return out;
}

export interface Finding {
  readonly check: string;
  readonly message: string;
  readonly ops?: readonly string[];
}

function describe(op: ChaosOp): string {
  const out =
    op.outcome === "ok"
      ? JSON.stringify(op.output)
      : `${op.outcome}${op.error === undefined ? "" : ` (${op.error})`}`;
  const served =
    op.served === undefined ||
    (op.served.node === op.node && op.served.incarnation === op.incarnation)
      ? ""
      : ` (served by ${op.served.node}#${op.served.incarnation})`;
  return `#${op.id} c${op.client}@${op.node}#${op.incarnation}${served} [${op.invoke.toFixed(1)}, ${op.returnTime?.toFixed(1) ?? "…"}] ${op.kind} ${op.key ?? ""} ${JSON.stringify(op.input)} → ${out}`;
}

/** The serializable reads' promises (see the file comment). */
export function checkSerializableReads(ops: readonly ChaosOp[]): Finding[] {
  const findings: Finding[] = [];
  const writes = new Map<string, ChaosOp>();
  for (const op of ops) {
    if (op.input?.type === "put" || op.input?.type === "put-if") writes.set(op.input.value, op);
  }
  const seenVersion = new Map<string, { version: Version; op: ChaosOp }>();
  const observe = (op: ChaosOp, value: string, version: Version): void => {
    const before = seenVersion.get(value);
    if (before === undefined) seenVersion.set(value, { version, op });
    else if (compareVersions(before.version, version) !== 0)
      findings.push({
        check: "serializable",
        message: `value ${JSON.stringify(value)} seen with two versions`,
        ops: [describe(before.op), describe(op)],
      });
  };
  const lastOnNode = new Map<string, ChaosOp>();
  for (const op of [...ops].sort((a, b) => a.invoke - b.invoke)) {
    if (op.outcome !== "ok" || op.output?.type !== "found") continue;
    const { value, version } = op.output;
    observe(op, value, version);
    if (op.kind !== "get-serializable") continue;
    const w = writes.get(value);
    if (w === undefined) {
      findings.push({
        check: "serializable",
        message: `read a value no write wrote`,
        ops: [describe(op)],
      });
      continue;
    }
    if (w.invoke > (op.returnTime as number)) {
      findings.push({
        check: "serializable",
        message: "read a value before its write was invoked",
        ops: [describe(w), describe(op)],
      });
    } else if (w.outcome === "fail") {
      findings.push({
        check: "serializable",
        message: "read the value of a write reported as not applied",
        ops: [describe(w), describe(op)],
      });
    } else if (
      w.outcome === "ok" &&
      w.output?.type === "written" &&
      compareVersions(w.output.version, version) !== 0
    ) {
      findings.push({
        check: "serializable",
        message: "read a value with another version than its write got",
        ops: [describe(w), describe(op)],
      });
    }
    if (op.served === undefined) continue;
    const k = `${op.served.node}#${op.served.incarnation}/${op.key}`;
    const prev = lastOnNode.get(k);
    if (
      prev !== undefined &&
      prev.output?.type === "found" &&
      (prev.returnTime as number) < op.invoke &&
      compareVersions(version, prev.output.version) < 0
    ) {
      findings.push({
        check: "serializable",
        message: `a replica went back in time (node ${op.served.node}, key ${op.key})`,
        ops: [describe(prev), describe(op)],
      });
    }
    if (prev === undefined || (prev.returnTime as number) < op.invoke) lastOnNode.set(k, op);
  }
  return findings;
}

/**
 * Acknowledged writes lost, as the final reads show them (the checker would call these stale
 * reads; this names them plainly): a key whose final version is below an acknowledged write's,
 * or absent although its highest acknowledged write is a Put and no Delete could have followed.
 */
export function lostWrites(
  ops: readonly ChaosOp[],
  finals: ReadonlyMap<string, { value: string; version: Version } | null>,
): Finding[] {
  const findings: Finding[] = [];
  const byKey = new Map<string, ChaosOp[]>();
  for (const op of ops) {
    if (op.key === null || op.kind === "get" || op.kind === "get-serializable") continue;
    const list = byKey.get(op.key) ?? [];
    list.push(op);
    byKey.set(op.key, list);
  }
  for (const [key, list] of byKey) {
    if (!finals.has(key)) continue;
    const final = finals.get(key) ?? null;
    let top: { op: ChaosOp; version: Version } | null = null;
    for (const op of list) {
      const o = op.output;
      if (op.outcome !== "ok" || o === null || (o.type !== "written" && o.type !== "deleted"))
        continue;
      if (top === null || compareVersions(o.version, top.version) > 0)
        top = { op, version: o.version };
    }
    if (top === null) continue;
    if (final !== null && compareVersions(final.version, top.version) < 0) {
      findings.push({
        check: "acknowledged-writes",
        message: `key ${key}: final version ${final.version.index}/${final.version.term} is below the acknowledged ${top.version.index}/${top.version.term}`,
        ops: [describe(top.op)],
      });
    }
    if (final === null && top.op.output?.type === "written") {
      const laterDelete = list.some(
        (op) =>
          (op.kind === "delete" || op.kind === "delete-if") &&
          op.outcome !== "fail" &&
          (op.outcome !== "ok" ||
            (op.output?.type === "deleted" && compareVersions(op.output.version, top.version) > 0)),
      );
      if (!laterDelete)
        findings.push({
          check: "acknowledged-writes",
          message: `key ${key}: absent at the end although its last acknowledged write is a Put`,
          ops: [describe(top.op)],
        });
    }
  }
  return findings;
}

export interface LinearizabilityVerdict {
  readonly result: CheckResult;
  readonly ms: number;
  readonly operations: number;
}

export function checkLinearizable(
  ops: readonly ChaosOp[],
  prefix: string,
  budget?: number,
): LinearizabilityVerdict {
  const history = toRegisterHistory(ops, prefix);
  const t0 = performance.now();
  const result = checkRegisterHistory(history, budget === undefined ? {} : { budget });
  return { result, ms: performance.now() - t0, operations: history.length };
}

export { describeRegisterOp };

/** One member's cluster view (Meta.WatchCluster), the fields the placement check reads. */
export interface PlacementView {
  /** The node that answered. */
  readonly node: string;
  readonly nodes: readonly { id: string; member_state: string; replicas: number }[];
  readonly shards: readonly {
    id: number;
    leader: string;
    replicas: readonly string[];
    term: number;
  }[];
}

/** Shard id → its group's replicas as its latest leader names them (see the file comment). */
export function shardGroups(
  views: readonly PlacementView[],
): Map<number, { replicas: readonly string[]; term: number; by: string }> {
  const groups = new Map<
    number,
    { replicas: readonly string[]; term: number; by: string; rank: number }
  >();
  for (const v of views) {
    for (const s of v.shards) {
      // The leader's own view first, then any view naming a leader, at the highest term.
      const rank = s.term * 4 + (s.leader === v.node ? 2 : s.leader !== "" ? 1 : 0);
      const prev = groups.get(s.id);
      if (prev === undefined || rank > prev.rank)
        groups.set(s.id, { replicas: s.replicas, term: s.term, by: v.node, rank });
    }
  }
  return new Map(
    [...groups].map(([id, g]) => [id, { replicas: g.replicas, term: g.term, by: g.by }]),
  );
}

/** The placement's promises after the heal (see the file comment); [] when all hold. */
export function checkPlacement(
  views: readonly PlacementView[],
  replicationFactor: number,
  founding = replicationFactor,
): Finding[] {
  const metaMost = Math.max(founding, replicationFactor);
  const findings: Finding[] = [];
  const placement = (message: string): void => {
    findings.push({ check: "placement", message });
  };
  // A member is active when every view that lists it says so.
  const states = new Map<string, Set<string>>();
  const counts = new Map<string, Set<number>>();
  for (const v of views) {
    for (const n of v.nodes) {
      states.set(n.id, (states.get(n.id) ?? new Set()).add(n.member_state));
      counts.set(n.id, (counts.get(n.id) ?? new Set()).add(n.replicas));
    }
  }
  for (const [id, s] of states) {
    if (s.size !== 1 || !s.has("active"))
      placement(`member ${id} is ${[...s].join("/")} in the views, not active`);
  }
  const active = (id: string): boolean =>
    states.get(id)?.size === 1 && states.get(id)?.has("active") === true;
  const groups = shardGroups(views);
  const held = new Map<string, number>();
  for (const [shard, g] of groups) {
    const nodes = g.replicas.map(nodeOfReplica);
    for (const n of nodes) held.set(n, (held.get(n) ?? 0) + 1);
    const most = shard === 0 ? metaMost : replicationFactor;
    const rf = replicationFactor;
    if (nodes.length < rf || nodes.length > most || new Set(nodes).size !== nodes.length)
      placement(
        `shard ${shard} has replicas ${g.replicas.join(",")} (${g.by}'s view, term ${g.term}), not ${most === rf ? rf : `${rf} to ${most}`} on distinct nodes`,
      );
    const inactive = nodes.filter((n) => !active(n));
    if (inactive.length > 0)
      placement(`shard ${shard} has replicas on ${inactive.join(", ")}, not active members`);
    // The group's own members name the same nodes (a view names replicas by node id or by
    // replica id, as the event that set it had them); a node outside the group is dormant.
    const want = [...nodes].sort().join(",");
    for (const v of views) {
      if (!nodes.includes(v.node)) continue;
      const mine = v.shards
        .find((s) => s.id === shard)
        ?.replicas.map(nodeOfReplica)
        .sort();
      if (mine !== undefined && mine.join(",") !== want)
        placement(
          `shard ${shard}: ${v.node} names replicas ${mine.join(",")}, its leader's view ${want} (two groups, or a change not yet applied)`,
        );
    }
  }
  // No move under way: the meta group counts on each member the groups it is a voter of.
  for (const [id, c] of counts) {
    const want = held.get(id) ?? 0;
    if (c.size !== 1 || !c.has(want))
      placement(
        `member ${id}: the meta group places ${[...c].join("/")} replica(s) on it, its groups' voters ${want} (a move under way)`,
      );
  }
  return findings;
}
