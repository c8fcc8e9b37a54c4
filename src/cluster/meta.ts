/**
 * The cluster's metadata (design.md §5.1), as a pure state machine: the cluster id, the member
 * nodes and every created shard's replica set. Shard 0's Raft group (the meta group) carries
 * MetaCommands in its log beside client KV commands; its state machine applies them with
 * `MetaState.apply` and writes the returned records under the internal prefix of shard 0's engine
 * (src/replication/commands.ts), where no client key can reach them.
 *
 * Invariants:
 *   1. Bootstrap happens once: a second bootstrap changes nothing and names the existing id.
 *   2. A shard's replica set is written once: the first committed create-shard wins, later ones
 *      are no-ops that name the existing assignment. Shard 0's replicas are the bootstrap members.
 *   3. `MetaState.load(state.records())` equals `state`, and so does loading every record `apply`
 *      ever returned (later records of a key replace earlier ones): a restart or a snapshot
 *      install reproduces the state exactly.
 *   4. Everything here is deterministic: replicas applying the same log agree byte for byte.
 *
 * Encoding (both commands and records): u8 format version (1) | UTF-8 JSON, validated field by
 * field; unknown fields, versions or ops are refused (CAIRN_ERR_MALFORMED_COMMAND for commands,
 * CAIRN_ERR_MALFORMED_META for stored records).
 *
 * Record keys (without the engine's internal prefix byte 0x00):
 *   meta/cluster            {clusterId, totalShards, replicationFactor}
 *   meta/member/<id>        {id, rpcAddr, httpAddr, incarnation?, retired?, state?}
 *   meta/shard/<10 digits>  {replicas, nodes?, moving?}   (the id zero-padded: keys sort numerically)
 *   meta/leader/<10 digits> {node}       (the shard's preferred leader, set by prefer-leader)
 *
 * A shard's record holds its group's initial voters as replica ids (src/cluster/replica.ts),
 * frozen when the create-shard entry applies, so every replica starts the group alike; once a
 * move (move-shard) placed it elsewhere, also its `nodes` now and whether the move is under way
 * (design.md §5.2). A member whose data directory was wiped rejoins with a new incarnation
 * (`rejoin`): its old one is retired. Each group's leader makes its voters the current replicas
 * of the shard's nodes through membership changes (src/node/replicas.ts), so the initial
 * voters say nothing about the group's voters now. A member's `state` (absent: active) follows
 * its life: joining, active, decommissioning, decommissioned, dead, removed (set-state). A node
 * that joins or rejoins under a decommissioned or removed member's id with a data directory
 * the member never had starts a new life as that member (`joining` again, its last incarnation
 * retired): a StatefulSet's pod scaled down and up again comes back under its old name.
 *
 * Caveat: addresses are checked for shape only, not parsed.
 */
import { CairnError } from "../common/errors.ts";
import { DenseMap, isObject, type ReadonlyDenseMap } from "../common/index.ts";
import { sameAddress } from "../config/address.ts";
import { nodeOfReplica, replicaIdOf } from "./replica.ts";
import { xxhash64 } from "./routing.ts";

/**
 * A member's life (design.md §5.2): `joining → active → decommissioning → decommissioned`, or
 * `active → dead → removed`. Only the meta leader changes it (set-state), except `joining`,
 * which a node's own join proposes (also for a new node under a decommissioned or removed
 * member's id: #newLife). Replicas are placed on `active` members only.
 */
export const MEMBER_STATES = [
  "joining",
  "active",
  "decommissioning",
  "decommissioned",
  "dead",
  "removed",
] as const;
export type MemberState = (typeof MEMBER_STATES)[number];

/**
 * The highest cluster version this build runs (docs/operations.md, "Upgrading"). A cluster
 * version names a set of formats and rules every member applies alike; a build that brings in a
 * new one (a meta command, a record field, an apply rule) raises this number and uses what it
 * brings only once the cluster's version (MetaState.version) has reached it, which the meta
 * leader raises once every member that may serve again runs a build that has it (set-build,
 * set-version). Builds before the cluster version ran version 1 and wrote the same records.
 *
 * What each version brings:
 *   2. set-state refuses to mark a `decommissioning` member `dead` (VERSION_DECOMMISSION_STAYS).
 *   3. a member keeps at most MAX_RETIRED_INCARNATIONS retired incarnations: a rejoin or a new
 *      life that would retire one more is refused (VERSION_REJOIN_LIMIT).
 *   4. the meta group's old voter on a member that keeps a learner of it is demoted, not removed
 *      and added back (VERSION_DEMOTION).
 *   5. a moving shard's placement records the nodes its group may still count as voters
 *      (`ShardPlacement.was`), and no such member is decommissioned or removed; a set-state may
 *      name the state it changes from, and is refused when the member is no longer in it
 *      (VERSION_MOVE_ORIGIN).
 */
export const BUILD_VERSION = 5;
/**
 * From this cluster version on, a `decommissioning` member never becomes `dead`. The allocator
 * proposes `dead` only for a `joining` or `active` member; a decommission committed between its
 * pass and its proposal's apply made the operator's decommission `dead`, then `active` once the
 * member was seen again: forgotten without a word. A rule of the apply, so a version's: a
 * member applying the older rule would make the state diverge.
 */
export const VERSION_DECOMMISSION_STAYS = 2;
/**
 * From this cluster version on, a `rejoin` (or a `join` starting a member's new life) that would
 * give the member more than MAX_RETIRED_INCARNATIONS retired incarnations is refused. A rule of
 * the apply, so a version's: a member applying the older rule would make the state diverge.
 */
export const VERSION_REJOIN_LIMIT = 3;
/**
 * From this cluster version on, the meta group's old voter on a member that keeps a learner of
 * it is demoted to learner in one change (add-learner on a voter, src/node/replicas.ts) rather
 * than removed and added back. A rule of a group's Raft log, not of the meta state: the core of
 * an older build ignores an add-learner that names a voter (it had no demotion) and would keep
 * as a voter what the others demoted, the group's replicas then disagreeing on its quorum. So
 * no demotion is proposed before every member runs a build that applies it.
 */
export const VERSION_DEMOTION = 4;
/**
 * From this cluster version on:
 *   - a move records, in its placement, the nodes it took out (`ShardPlacement.was`; a move
 *     that redirects one under way adds the nodes it takes out to those): the shard's group may
 *     count any of them as a voter until the move is settled. Before, only the shard's new nodes
 *     were recorded, and a member the placement no longer named was decommissioned or removed
 *     while its group still needed it for a quorum (a helper review of 2026-12-06: a shard on
 *     [a, d, e], d and e dead; the allocator replaced d, then, the group having no leader to
 *     make the move, redirected it to replace e too; d and e were then removable, and the group,
 *     whose voters they still were, could never have its quorum back). Now set-state refuses to
 *     make such a member `decommissioned` or `removed` until the move is settled.
 *   - a set-state may name the state it changes from (`from`), and is refused when the member
 *     is no longer in it. The allocator names it: its `active` for a member it saw `dead` or
 *     `joining`, proposed again after a timeout (an outcome unknown), or proposed by a new meta
 *     leader on a state behind its log, undid an operator's decommission committed meanwhile.
 * Rules of the apply and a record's field, so a version's.
 */
export const VERSION_MOVE_ORIGIN = 5;
/**
 * The most retired incarnations a member keeps. Each wipe and rejoin (a pod whose volume is lost
 * at every restart, in a loop; a node rejoining again and again with made-up incarnations: it
 * needs only the member's id, and the member's current incarnation not to answer, checkRejoin)
 * retired one more, kept for good: in the member's record (rewritten whole at each change of
 * it), in every snapshot of the meta group, in each isRetired call of every group's upkeep.
 *
 * Refused past the bound rather than the oldest forgotten: the meta state does not know its
 * groups' configurations, and a group that still holds a forgotten incarnation's replica (its
 * leader down, its quorum lost, or a leader behind that added it) would no longer be repaired
 * (nextReplicaChange changes nothing while a member is neither current nor retired), while an
 * old copy of the data directory under that incarnation would rejoin as a new one. 100 wipes of
 * one member is far past any disk's replacement, and 1,024 members keep at most ~4 MB of them.
 * A member at the bound rejoins no more: its node starts under another node id
 * (CAIRN_ERR_REJOIN_LIMIT, docs/errors.md).
 */
export const MAX_RETIRED_INCARNATIONS = 100;
/** The highest cluster version a command or record may name. */
const MAX_VERSION = 0x7fff_ffff;

/** Whether a member in `state` keeps a copy of the meta group (a learner when not a voter). */
export function isMetaHolder(state: MemberState | undefined): boolean {
  return state === "joining" || state === "active" || state === "decommissioning";
}

/**
 * The state changes set-state may make (a `removed` member never comes back: a new node under
 * its id, or a decommissioned one's, starts a new life by joining, #newLife).
 */
const TRANSITIONS: Readonly<Record<MemberState, readonly MemberState[]>> = {
  joining: ["active", "dead"],
  active: ["decommissioning", "dead"],
  decommissioning: ["decommissioned", "dead", "active"],
  decommissioned: ["removed"],
  dead: ["active", "removed"],
  removed: [],
};

export interface MetaMember {
  readonly id: string;
  readonly rpcAddr: string;
  readonly httpAddr: string;
  /**
   * The random id of the member's data directory, recorded by the member itself once it has
   * joined (set-member). A node whose data directory holds another incarnation than the one
   * recorded lost its state (a wiped directory): it must not take part as that member.
   */
  readonly incarnation?: string;
  /**
   * The member's earlier incarnations, oldest first (set by `rejoin`): replicas carrying one of
   * them are gone for good and leave their groups.
   */
  readonly retired?: readonly string[];
  /** Where the member stands in its life; absent: `active` (every founding member). */
  readonly state?: MemberState;
  /**
   * The member's data directory's file system is nearly full (`cluster.disk_full_percent`, or
   * under `storage.min_free_bytes` available; set by the member itself: set-disk): no new
   * replica is placed on it, and it leads no shard another replica of which has room
   * (leaderWanted). Absent: it has room.
   */
  readonly diskFull?: true;
  /**
   * The highest cluster version the member's build runs (BUILD_VERSION), reported by the member
   * itself (set-build, or its join). Absent: 1.
   */
  readonly build?: number;
}

/** Where a shard's replicas are now, once a move changed them from its initial voters. */
export interface ShardPlacement {
  /** Its nodes in rank order (the first is its preferred leader). */
  readonly nodes: readonly string[];
  /** A move is under way: the group's leader has not yet made its voters these nodes. */
  readonly moving: boolean;
  /**
   * While moving, from VERSION_MOVE_ORIGIN on: the nodes, not among `nodes`, that the group may
   * still count as voters (the nodes the move took out, and those of the moves it redirected),
   * sorted. Absent on a settled shard, and on a move begun before that version (not known).
   */
  readonly was?: readonly string[];
}

export type MetaCommand =
  | {
      readonly op: "bootstrap";
      readonly clusterId: string;
      readonly totalShards: number;
      readonly replicationFactor: number;
      readonly members: readonly MetaMember[];
    }
  | { readonly op: "create-shard"; readonly shard: number; readonly replicas: readonly string[] }
  | { readonly op: "set-member"; readonly member: MetaMember }
  /** Member `id` lost its data directory and came back as `incarnation`. */
  | { readonly op: "rejoin"; readonly id: string; readonly incarnation: string }
  /** Shard `shard`'s leader should be node `node` (one of its replicas): Admin.TransferLeader. */
  | { readonly op: "prefer-leader"; readonly shard: number; readonly node: string }
  /** A node started with the seeds of a running cluster asks to be a member (`joining`). */
  | { readonly op: "join"; readonly member: MetaMember }
  /**
   * The meta leader moves member `id` along its life (TRANSITIONS); when `from` is named (from
   * VERSION_MOVE_ORIGIN on), only if the member is in that state now.
   */
  | {
      readonly op: "set-state";
      readonly id: string;
      readonly state: MemberState;
      readonly from?: MemberState;
    }
  /** Member `id` reports its data directory's disk nearly full (or no longer). */
  | { readonly op: "set-disk"; readonly id: string; readonly full: boolean }
  /**
   * Shard `shard`'s nodes become `nodes`, if they are `from` now (so two allocators never
   * both move it): one node added, one removed, or both (a replacement).
   */
  | {
      readonly op: "move-shard";
      readonly shard: number;
      readonly from: readonly string[];
      readonly nodes: readonly string[];
    }
  /** Shard `shard`'s group has `nodes` as its voters: its move is done. */
  | { readonly op: "settle-shard"; readonly shard: number; readonly nodes: readonly string[] }
  /** Member `id` runs a build whose highest cluster version is `build` (BUILD_VERSION). */
  | { readonly op: "set-build"; readonly id: string; readonly build: number }
  /** The meta leader raises the cluster version: every member that may serve again runs it. */
  | { readonly op: "set-version"; readonly version: number };

/** What applying one MetaCommand did. Every kind but the first of each pair changes nothing. */
export type MetaOutcome =
  | { readonly kind: "bootstrapped"; readonly clusterId: string }
  | { readonly kind: "already-bootstrapped"; readonly clusterId: string }
  | { readonly kind: "shard-created"; readonly shard: number; readonly replicas: readonly string[] }
  | { readonly kind: "shard-exists"; readonly shard: number; readonly replicas: readonly string[] }
  | { readonly kind: "member-added"; readonly member: MetaMember }
  | { readonly kind: "member-updated"; readonly member: MetaMember; readonly previous: MetaMember }
  | { readonly kind: "member-unchanged"; readonly member: MetaMember }
  | { readonly kind: "leader-preferred"; readonly shard: number; readonly node: string }
  | { readonly kind: "leader-unchanged"; readonly shard: number; readonly node: string }
  | {
      readonly kind: "state-changed";
      readonly id: string;
      readonly from: MemberState;
      readonly to: MemberState;
    }
  | { readonly kind: "state-unchanged"; readonly id: string; readonly state: MemberState }
  | { readonly kind: "disk-changed"; readonly id: string; readonly full: boolean }
  | { readonly kind: "disk-unchanged"; readonly id: string; readonly full: boolean }
  | { readonly kind: "shard-moved"; readonly shard: number; readonly nodes: readonly string[] }
  | { readonly kind: "shard-settled"; readonly shard: number }
  | { readonly kind: "shard-unchanged"; readonly shard: number }
  | { readonly kind: "version-changed"; readonly from: number; readonly to: number }
  | { readonly kind: "version-unchanged"; readonly version: number }
  /**
   * The command can never apply as written (bad shard, unknown replica, not bootstrapped…);
   * `retired`: a `rejoin` with an incarnation the member left behind (an old copy of its data).
   */
  | {
      readonly kind: "rejected";
      readonly reason: string;
      readonly retired?: true;
      /** The command names a member that was removed for good (its node must stop). */
      readonly removed?: true;
      /**
       * A `rejoin` confirming the incarnation of a member decommissioned meanwhile (while its
       * node was down): the node must serve nothing (CAIRN_ERR_NODE_DECOMMISSIONED).
       */
      readonly decommissioned?: true;
      /**
       * A member's build is older than the cluster's version (a join or a set-build): the node
       * must run a newer build (CAIRN_ERR_CLUSTER_VERSION).
       */
      readonly tooOld?: true;
      /**
       * A `rejoin` or new life that would retire more than MAX_RETIRED_INCARNATIONS of the
       * member's incarnations (CAIRN_ERR_REJOIN_LIMIT).
       */
      readonly rejoinLimit?: true;
    };

/** One stored record: `key` without the engine's internal prefix byte. */
export interface MetaRecord {
  readonly key: Uint8Array;
  readonly value: Uint8Array;
}

export interface MetaApplyResult {
  /** The state after the command (the same object when nothing changed). */
  readonly state: MetaState;
  readonly outcome: MetaOutcome;
  /** Records to write (put) so the stored state matches `state`; empty when nothing changed. */
  readonly records: readonly MetaRecord[];
}

/** A plain, canonically ordered picture of a state: for equality in tests and for logs. */
export interface MetaStateView {
  readonly clusterId: string | null;
  readonly totalShards: number;
  readonly replicationFactor: number;
  /** The cluster version (1 until the meta leader raised it). */
  readonly version: number;
  readonly members: readonly MetaMember[];
  readonly shards: readonly { readonly shard: number; readonly replicas: readonly string[] }[];
  readonly leaders: readonly { readonly shard: number; readonly node: string }[];
  readonly placements: readonly ({ readonly shard: number } & ShardPlacement)[];
}

const FORMAT_VERSION = 1;
/** The configuration's node_id rule (src/config/schema.ts), repeated so this file stays pure. */
const NODE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const CLUSTER_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
/** A node id, then `@` and an incarnation tag (src/cluster/replica.ts) when it has one. */
const REPLICA_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}(@[A-Za-z0-9]{1,64})?$/;
/** An address as configured (`host:port`, `[v6]:port`): no spaces or control characters. */
const ADDRESS = /^[^\s\p{Cc}]{1,300}$/u;
const MAX_SHARDS = 0x1_0000_0000;
/** The most nodes a shard may have (cluster.replication_factor's bound, and one more in a move). */
const MAX_REPLICAS = 16;
const SHARD_DIGITS = 10;

const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: true });

export const META_KEY_PREFIX = "meta/";
const CLUSTER_KEY = "meta/cluster";
const MEMBER_KEY = "meta/member/";
const SHARD_KEY = "meta/shard/";
const LEADER_KEY = "meta/leader/";
/** The last MetaState's serial (MetaState.shardsChangedSince). */
let stateSerial = 0;

// ---------------------------------------------------------------------------------------------
// Commands

export function encodeMetaCommand(cmd: MetaCommand): Uint8Array {
  const problem = checkCommand(cmd);
  if (problem !== null) throw malformedCommand(problem);
  return encodeJson(canonicalCommand(cmd));
}

export function decodeMetaCommand(data: Uint8Array): MetaCommand {
  let raw: unknown;
  try {
    raw = decodeJson(data);
  } catch (err) {
    throw malformedCommand(err instanceof Error ? err.message : String(err));
  }
  const cmd = parseCommand(raw);
  if (typeof cmd === "string") throw malformedCommand(cmd);
  const problem = checkCommand(cmd);
  if (problem !== null) throw malformedCommand(problem);
  return cmd;
}

/** The command with its fields in a fixed order (so its bytes are canonical). */
function canonicalCommand(cmd: MetaCommand): MetaCommand {
  switch (cmd.op) {
    case "bootstrap":
      return {
        op: cmd.op,
        clusterId: cmd.clusterId,
        totalShards: cmd.totalShards,
        replicationFactor: cmd.replicationFactor,
        members: cmd.members.map(canonicalMember),
      };
    case "create-shard":
      return { op: cmd.op, shard: cmd.shard, replicas: [...cmd.replicas] };
    case "set-member":
      return { op: cmd.op, member: canonicalMember(cmd.member) };
    case "rejoin":
      return { op: cmd.op, id: cmd.id, incarnation: cmd.incarnation };
    case "prefer-leader":
      return { op: cmd.op, shard: cmd.shard, node: cmd.node };
    case "join":
      return { op: cmd.op, member: canonicalMember(cmd.member) };
    case "set-state":
      return cmd.from === undefined
        ? { op: cmd.op, id: cmd.id, state: cmd.state }
        : { op: cmd.op, id: cmd.id, state: cmd.state, from: cmd.from };
    case "set-disk":
      return { op: cmd.op, id: cmd.id, full: cmd.full };
    case "move-shard":
      return { op: cmd.op, shard: cmd.shard, from: [...cmd.from], nodes: [...cmd.nodes] };
    case "settle-shard":
      return { op: cmd.op, shard: cmd.shard, nodes: [...cmd.nodes] };
    case "set-build":
      return { op: cmd.op, id: cmd.id, build: cmd.build };
    case "set-version":
      return { op: cmd.op, version: cmd.version };
  }
}

/** `m` without its full-disk mark. */
function withRoom(m: MetaMember): MetaMember {
  const copy: { -readonly [K in keyof MetaMember]: MetaMember[K] } = { ...m };
  delete copy.diskFull;
  return copy;
}

function canonicalMember(m: MetaMember): MetaMember {
  const base = { id: m.id, rpcAddr: m.rpcAddr, httpAddr: m.httpAddr };
  const withIncarnation =
    m.incarnation === undefined ? base : { ...base, incarnation: m.incarnation };
  const withRetired =
    m.retired === undefined || m.retired.length === 0
      ? withIncarnation
      : { ...withIncarnation, retired: [...m.retired] };
  const withState =
    m.state === undefined || m.state === "active"
      ? withRetired
      : { ...withRetired, state: m.state };
  const withDisk = m.diskFull === true ? { ...withState, diskFull: true as const } : withState;
  // Version 1 is not written: a version-1 record is the one a build before versions wrote.
  return m.build === undefined || m.build <= 1 ? withDisk : { ...withDisk, build: m.build };
}

/** Shape of untrusted JSON into a command, or why it is not one. */
function parseCommand(raw: unknown): MetaCommand | string {
  if (!isObject(raw)) return "not an object";
  switch (raw["op"]) {
    case "bootstrap": {
      const bad = unknownFields(raw, [
        "op",
        "clusterId",
        "totalShards",
        "replicationFactor",
        "members",
      ]);
      if (bad !== null) return bad;
      const { clusterId, totalShards, replicationFactor, members } = raw;
      if (typeof clusterId !== "string") return "clusterId is not a string";
      if (typeof totalShards !== "number") return "totalShards is not a number";
      if (typeof replicationFactor !== "number") return "replicationFactor is not a number";
      if (!Array.isArray(members)) return "members is not an array";
      const parsed: MetaMember[] = [];
      for (const m of members) {
        const member = parseMember(m);
        if (typeof member === "string") return member;
        parsed.push(member);
      }
      return { op: "bootstrap", clusterId, totalShards, replicationFactor, members: parsed };
    }
    case "create-shard": {
      const bad = unknownFields(raw, ["op", "shard", "replicas"]);
      if (bad !== null) return bad;
      const { shard, replicas } = raw;
      if (typeof shard !== "number") return "shard is not a number";
      if (!Array.isArray(replicas) || !replicas.every((r) => typeof r === "string"))
        return "replicas is not an array of strings";
      return { op: "create-shard", shard, replicas: replicas as string[] };
    }
    case "set-member": {
      const bad = unknownFields(raw, ["op", "member"]);
      if (bad !== null) return bad;
      const member = parseMember(raw["member"]);
      return typeof member === "string" ? member : { op: "set-member", member };
    }
    case "rejoin": {
      const bad = unknownFields(raw, ["op", "id", "incarnation"]);
      if (bad !== null) return bad;
      const { id, incarnation } = raw;
      if (typeof id !== "string" || typeof incarnation !== "string")
        return "a rejoin's id and incarnation must be strings";
      return { op: "rejoin", id, incarnation };
    }
    case "prefer-leader": {
      const bad = unknownFields(raw, ["op", "shard", "node"]);
      if (bad !== null) return bad;
      const { shard, node } = raw;
      if (typeof shard !== "number" || typeof node !== "string")
        return "a prefer-leader's shard must be a number and its node a string";
      return { op: "prefer-leader", shard, node };
    }
    case "join": {
      const bad = unknownFields(raw, ["op", "member"]);
      if (bad !== null) return bad;
      const member = parseMember(raw["member"]);
      return typeof member === "string" ? member : { op: "join", member };
    }
    case "set-state": {
      const bad = unknownFields(raw, ["op", "id", "state", "from"]);
      if (bad !== null) return bad;
      const { id, state, from } = raw;
      if (typeof id !== "string" || !isMemberState(state))
        return "a set-state's id must be a string and its state a member state";
      if (from === undefined) return { op: "set-state", id, state };
      if (!isMemberState(from)) return "a set-state's from must be a member state";
      return { op: "set-state", id, state, from };
    }
    case "set-disk": {
      const bad = unknownFields(raw, ["op", "id", "full"]);
      if (bad !== null) return bad;
      const { id, full } = raw;
      if (typeof id !== "string" || typeof full !== "boolean")
        return "a set-disk's id must be a string and full a boolean";
      return { op: "set-disk", id, full };
    }
    case "move-shard": {
      const bad = unknownFields(raw, ["op", "shard", "from", "nodes"]);
      if (bad !== null) return bad;
      const { shard, from, nodes } = raw;
      if (typeof shard !== "number" || !isStringArray(from) || !isStringArray(nodes))
        return "a move-shard's shard must be a number, its from and nodes arrays of strings";
      return { op: "move-shard", shard, from, nodes };
    }
    case "settle-shard": {
      const bad = unknownFields(raw, ["op", "shard", "nodes"]);
      if (bad !== null) return bad;
      const { shard, nodes } = raw;
      if (typeof shard !== "number" || !isStringArray(nodes))
        return "a settle-shard's shard must be a number and its nodes an array of strings";
      return { op: "settle-shard", shard, nodes };
    }
    case "set-build": {
      const bad = unknownFields(raw, ["op", "id", "build"]);
      if (bad !== null) return bad;
      const { id, build } = raw;
      if (typeof id !== "string" || typeof build !== "number")
        return "a set-build's id must be a string and its build a number";
      return { op: "set-build", id, build };
    }
    case "set-version": {
      const bad = unknownFields(raw, ["op", "version"]);
      if (bad !== null) return bad;
      const { version } = raw;
      if (typeof version !== "number") return "a set-version's version must be a number";
      return { op: "set-version", version };
    }
    default:
      // An op of a newer build (a member runs an older one): see docs/operations.md, "Upgrading".
      return `unknown op ${JSON.stringify(raw["op"])} (written by a newer Cairn build? every member must run the same build: docs/operations.md, "Upgrading")`;
  }
}

function parseMember(raw: unknown): MetaMember | string {
  if (!isObject(raw)) return "a member is not an object";
  const bad = unknownFields(raw, [
    "id",
    "rpcAddr",
    "httpAddr",
    "incarnation",
    "retired",
    "state",
    "diskFull",
    "build",
  ]);
  if (bad !== null) return bad;
  const { id, rpcAddr, httpAddr, incarnation, retired, state, diskFull, build } = raw;
  if (typeof id !== "string" || typeof rpcAddr !== "string" || typeof httpAddr !== "string")
    return "a member's id, rpcAddr and httpAddr must be strings";
  if (incarnation !== undefined && typeof incarnation !== "string")
    return "a member's incarnation must be a string";
  if (
    retired !== undefined &&
    (!Array.isArray(retired) || !retired.every((r) => typeof r === "string"))
  )
    return "a member's retired incarnations must be strings";
  if (state !== undefined && !isMemberState(state)) return "a member's state is not a state";
  if (diskFull !== undefined && diskFull !== true) return "a member's diskFull must be true";
  if (build !== undefined && typeof build !== "number") return "a member's build must be a number";
  return canonicalMember({
    id,
    rpcAddr,
    httpAddr,
    ...(incarnation === undefined ? {} : { incarnation }),
    ...(retired === undefined ? {} : { retired: retired as string[] }),
    ...(state === undefined ? {} : { state }),
    ...(diskFull === true ? { diskFull } : {}),
    ...(build === undefined ? {} : { build }),
  });
}

/** Checks that need no state: null when the command is well formed. */
function checkCommand(cmd: MetaCommand): string | null {
  switch (cmd.op) {
    case "bootstrap": {
      const bad = checkCluster(cmd.clusterId, cmd.totalShards, cmd.replicationFactor);
      if (bad !== null) return bad;
      if (cmd.members.length === 0) return "no members";
      for (const m of cmd.members) {
        const bad = checkMember(m);
        if (bad !== null) return bad;
      }
      return duplicate(
        cmd.members.map((m) => m.id),
        "member",
      );
    }
    case "create-shard":
      if (!Number.isInteger(cmd.shard) || cmd.shard < 1 || cmd.shard >= MAX_SHARDS)
        return `shard ${cmd.shard} is not an integer in [1, 2^32)`;
      if (cmd.replicas.length === 0) return "no replicas";
      for (const r of cmd.replicas) {
        if (!NODE_ID.test(r)) return `bad replica id ${JSON.stringify(r)}`;
      }
      return duplicate(cmd.replicas, "replica");
    case "set-member":
      if (cmd.member.retired !== undefined) return "set-member cannot retire incarnations";
      if (cmd.member.state !== undefined) return "set-member cannot set a state (set-state does)";
      if (cmd.member.diskFull !== undefined)
        return "set-member cannot set diskFull (set-disk does)";
      if (cmd.member.build !== undefined) return "set-member cannot set a build (set-build does)";
      return checkMember(cmd.member);
    case "rejoin":
      if (!NODE_ID.test(cmd.id)) return `bad member id ${JSON.stringify(cmd.id)}`;
      if (!CLUSTER_ID.test(cmd.incarnation))
        return `bad incarnation ${JSON.stringify(cmd.incarnation)}`;
      return null;
    case "prefer-leader":
      if (!Number.isInteger(cmd.shard) || cmd.shard < 0 || cmd.shard >= MAX_SHARDS)
        return `shard ${cmd.shard} is not an integer in [0, 2^32)`;
      if (!NODE_ID.test(cmd.node)) return `bad node id ${JSON.stringify(cmd.node)}`;
      return null;
    case "join":
      if (
        cmd.member.retired !== undefined ||
        cmd.member.state !== undefined ||
        cmd.member.diskFull !== undefined
      )
        return "a join names neither retired incarnations, a state nor a full disk";
      if (cmd.member.incarnation === undefined) return "a join must name its incarnation";
      return checkMember(cmd.member);
    case "set-state":
    case "set-disk":
      if (!NODE_ID.test(cmd.id)) return `bad member id ${JSON.stringify(cmd.id)}`;
      return null;
    case "set-build":
      if (!NODE_ID.test(cmd.id)) return `bad member id ${JSON.stringify(cmd.id)}`;
      return checkVersion(cmd.build, "build");
    case "set-version":
      return checkVersion(cmd.version, "version");
    case "move-shard":
    case "settle-shard": {
      if (!Number.isInteger(cmd.shard) || cmd.shard < 0 || cmd.shard >= MAX_SHARDS)
        return `shard ${cmd.shard} is not an integer in [0, 2^32)`;
      const lists = cmd.op === "move-shard" ? [cmd.from, cmd.nodes] : [cmd.nodes];
      for (const list of lists) {
        if (list.length === 0 || list.length > MAX_REPLICAS)
          return `a shard's nodes must number 1 to ${MAX_REPLICAS}`;
        const bad = list.find((n) => !NODE_ID.test(n));
        if (bad !== undefined) return `bad node id ${JSON.stringify(bad)}`;
        const dup = duplicate(list, "node");
        if (dup !== null) return dup;
      }
      return null;
    }
  }
}

function checkCluster(clusterId: string, totalShards: number, factor: number): string | null {
  if (!CLUSTER_ID.test(clusterId)) return `bad cluster id ${JSON.stringify(clusterId)}`;
  if (!Number.isInteger(totalShards) || totalShards < 1 || totalShards > MAX_SHARDS)
    return `totalShards ${totalShards} is not an integer in [1, 2^32]`;
  if (!Number.isInteger(factor) || factor < 1)
    return `replicationFactor ${factor} is not an integer ≥ 1`;
  return null;
}

function checkVersion(v: number, what: string): string | null {
  return Number.isInteger(v) && v >= 1 && v <= MAX_VERSION
    ? null
    : `${what} ${v} is not an integer in [1, ${MAX_VERSION}]`;
}

function checkMember(m: MetaMember): string | null {
  if (!NODE_ID.test(m.id)) return `bad member id ${JSON.stringify(m.id)}`;
  if (!ADDRESS.test(m.rpcAddr)) return `bad rpcAddr ${JSON.stringify(m.rpcAddr)} of ${m.id}`;
  if (!ADDRESS.test(m.httpAddr)) return `bad httpAddr ${JSON.stringify(m.httpAddr)} of ${m.id}`;
  if (m.incarnation !== undefined && !CLUSTER_ID.test(m.incarnation))
    return `bad incarnation ${JSON.stringify(m.incarnation)} of ${m.id}`;
  if (m.state !== undefined && !isMemberState(m.state))
    return `bad state ${JSON.stringify(m.state)} of ${m.id}`;
  if (m.diskFull !== undefined && m.diskFull !== true)
    return `bad diskFull ${JSON.stringify(m.diskFull)} of ${m.id}`;
  if (m.build !== undefined && checkVersion(m.build, "build") !== null)
    return `bad build ${JSON.stringify(m.build)} of ${m.id}`;
  for (const r of m.retired ?? []) {
    if (!CLUSTER_ID.test(r) || r === m.incarnation)
      return `bad retired incarnation ${JSON.stringify(r)} of ${m.id}`;
  }
  return duplicate(m.retired ?? [], "retired incarnation");
}

function duplicate(ids: readonly string[], what: string): string | null {
  const seen = new Set<string>();
  for (const id of ids) {
    if (seen.has(id)) return `${what} ${id} listed twice`;
    seen.add(id);
  }
  return null;
}

// ---------------------------------------------------------------------------------------------
// State

export class MetaState {
  /** null until the bootstrap command applies. */
  readonly clusterId: string | null;
  /** 0 until bootstrapped. */
  readonly totalShards: number;
  /** 0 until bootstrapped. */
  readonly replicationFactor: number;
  /**
   * The cluster version (BUILD_VERSION): what every member that may serve again runs, so what
   * the meta group's rules and formats may use. 1 until set-version raises it; never lowered.
   */
  readonly version: number;
  readonly members: ReadonlyMap<string, MetaMember>;
  /**
   * Created shards (shard 0 from the bootstrap on) and their groups' initial voters, as replica
   * ids; their nodes in rank order (the first is the preferred leader) are `nodesOf(shard)`. By
   * shard id in an array, which a create-shard copies whole (a pointer a shard), where a `Map`
   * was copied entry by entry: a fill applies 1,024 create-shard entries on every node, each
   * copying every shard created before it.
   */
  readonly shards: ReadonlyDenseMap<readonly string[]>;
  /** Preferred leaders set by prefer-leader (Admin.TransferLeader), by shard. */
  readonly leaders: ReadonlyMap<number, string>;
  /**
   * The shards a move placed elsewhere than their initial voters (move-shard), by shard. A
   * DenseMap, as `shards` and for the same reason: a move and its settling are applied on every
   * node a few times a second during a rebalance, each copying this whole.
   */
  readonly placements: ReadonlyDenseMap<ShardPlacement>;
  #moving: readonly number[] | undefined;
  #replicaCounts: ReadonlyMap<string, number> | undefined;
  #fewestReplicas: number | undefined;
  #underReplicated: number | undefined;
  /** This state's number in the process, for shardsChangedSince (not a pointer: states chain). */
  readonly #serial = ++stateSerial;
  /**
   * When apply made this state from another by changing one shard's entry and nothing else (a
   * create-shard, a move, a settling): that state's serial and the shard.
   */
  #step: { readonly from: number; readonly shard: number } | undefined;

  private constructor(
    clusterId: string | null,
    totalShards: number,
    replicationFactor: number,
    members: ReadonlyMap<string, MetaMember>,
    shards: ReadonlyDenseMap<readonly string[]>,
    leaders: ReadonlyMap<number, string> = new Map(),
    placements: ReadonlyDenseMap<ShardPlacement> = new DenseMap(),
    version = 1,
  ) {
    this.clusterId = clusterId;
    this.totalShards = totalShards;
    this.replicationFactor = replicationFactor;
    this.version = version;
    this.members = members;
    this.shards = shards;
    this.leaders = leaders;
    this.placements = placements;
  }

  static empty(): MetaState {
    return new MetaState(null, 0, 0, new Map(), new DenseMap());
  }

  /**
   * Rebuilds a state from its stored records (in any order; a key given twice keeps the last).
   * Throws CAIRN_ERR_MALFORMED_META on a record that does not decode or a set that is not the
   * image of a state (members or shards without a cluster record, an unknown replica).
   */
  static load(records: Iterable<MetaRecord>): MetaState {
    let cluster: ClusterRecord | null = null;
    const members = new Map<string, MetaMember>();
    const shards = new Map<number, readonly string[]>();
    const leaders = new Map<number, string>();
    const placements = new Map<number, ShardPlacement>();
    for (const { key, value } of records) {
      const k = decodeKey(key);
      const raw = decodeRecordJson(k, value);
      if (k === CLUSTER_KEY) {
        cluster = parseClusterRecord(k, raw);
      } else if (k.startsWith(MEMBER_KEY)) {
        const m = parseMember(raw);
        if (typeof m === "string" || checkMember(m) !== null || k !== memberKeyText(m.id))
          throw malformedRecord(k, typeof m === "string" ? m : "bad member");
        members.set(m.id, canonicalMember(m));
      } else if (k.startsWith(SHARD_KEY)) {
        const digits = k.slice(SHARD_KEY.length);
        const shard = Number(digits);
        if (!/^[0-9]+$/.test(digits) || shardKeyText(shard) !== k)
          throw malformedRecord(k, "bad shard key");
        const record = parseShardRecord(k, raw);
        shards.set(shard, record.replicas);
        if (record.placement !== undefined) placements.set(shard, record.placement);
        else placements.delete(shard);
      } else if (k.startsWith(LEADER_KEY)) {
        const digits = k.slice(LEADER_KEY.length);
        const shard = Number(digits);
        if (!/^[0-9]+$/.test(digits) || leaderKeyText(shard) !== k)
          throw malformedRecord(k, "bad leader key");
        if (!isObject(raw) || unknownFields(raw, ["node"]) !== null)
          throw malformedRecord(k, "not a leader record");
        const node = raw["node"];
        if (typeof node !== "string" || !NODE_ID.test(node)) throw malformedRecord(k, "bad node");
        leaders.set(shard, node);
      } else {
        throw malformedRecord(k, "unknown record");
      }
    }
    if (cluster === null) {
      if (members.size > 0 || shards.size > 0)
        throw malformedRecord(CLUSTER_KEY, "members or shards stored without a cluster record");
      return MetaState.empty();
    }
    for (const [shard, replicas] of shards) {
      if (shard >= cluster.totalShards) throw malformedRecord(shardKeyText(shard), "out of range");
      for (const r of replicas) {
        if (!members.has(nodeOfReplica(r)))
          throw malformedRecord(shardKeyText(shard), `unknown replica ${r}`);
      }
      const placed = placements.get(shard);
      for (const n of [...(placed?.nodes ?? []), ...(placed?.was ?? [])]) {
        if (!members.has(n)) throw malformedRecord(shardKeyText(shard), `unknown node ${n}`);
      }
    }
    if (!shards.has(0)) throw malformedRecord(shardKeyText(0), "missing");
    for (const [shard, node] of leaders) {
      // A move may have taken the node off the shard since (preferredLeader skips it then).
      if (!shards.has(shard) || !members.has(node))
        throw malformedRecord(
          leaderKeyText(shard),
          `${node} is not a member, or ${shard} no shard`,
        );
    }
    return new MetaState(
      cluster.clusterId,
      cluster.totalShards,
      cluster.replicationFactor,
      members,
      DenseMap.of(shards),
      leaders,
      DenseMap.of(placements),
      cluster.version,
    );
  }

  /** Evaluates `cmd` against this state; never throws and never changes `this`. */
  apply(cmd: MetaCommand): MetaApplyResult {
    const problem = checkCommand(cmd);
    if (problem !== null) return this.#same({ kind: "rejected", reason: problem });
    switch (cmd.op) {
      case "bootstrap":
        return this.#bootstrap(cmd);
      case "create-shard":
        return this.#createShard(cmd.shard, cmd.replicas);
      case "set-member":
        return this.#setMember(cmd.member);
      case "rejoin":
        return this.#rejoin(cmd.id, cmd.incarnation);
      case "prefer-leader":
        return this.#preferLeader(cmd.shard, cmd.node);
      case "join":
        return this.#join(cmd.member);
      case "set-state":
        return this.#setState(cmd.id, cmd.state, cmd.from);
      case "set-disk":
        return this.#setDisk(cmd.id, cmd.full);
      case "move-shard":
        return this.#moveShard(cmd.shard, cmd.from, cmd.nodes);
      case "settle-shard":
        return this.#settleShard(cmd.shard, cmd.nodes);
      case "set-build":
        return this.#setBuild(cmd.id, cmd.build);
      case "set-version":
        return this.#setVersion(cmd.version);
    }
  }

  /**
   * The node that should lead `shard`: its preferred leader while that node is one of its
   * replicas, else its first-ranked replica.
   */
  preferredLeader(shard: number): string | undefined {
    const nodes = this.nodesOf(shard);
    const preferred = this.leaders.get(shard);
    return preferred !== undefined && nodes.includes(preferred) ? preferred : nodes[0];
  }

  /**
   * The node that should lead `shard` now: its preferred leader, unless that member reported its
   * disk full (set-disk) and an active member among the shard's other replicas did not; then the
   * first of those in rank order. A member reports its disk full at `cluster.disk_full_percent`
   * used and while it refuses Puts for `storage.min_free_bytes` (src/node/disk-watch.ts), and a
   * leader refuses Puts by its own disk: leadership leaves a member whose disk fills by itself,
   * and comes back once it has room. Leader spreading and a new group's first campaign follow
   * it; prefer-leader's apply does not (preferredLeader), so builds that differ here may hand a
   * leadership back and forth, and their meta states never diverge.
   */
  leaderWanted(shard: number): string | undefined {
    const preferred = this.preferredLeader(shard);
    if (preferred === undefined || this.members.get(preferred)?.diskFull !== true) return preferred;
    return this.nodesOf(shard).find((n) => this.hasRoom(n)) ?? preferred;
  }

  /** Where member `id` stands (undefined when it is not one). */
  stateOf(id: string): MemberState | undefined {
    const m = this.members.get(id);
    return m === undefined ? undefined : (m.state ?? "active");
  }

  /** The members replicas may be placed on, in id order. */
  activeMembers(): string[] {
    return [...this.members.values()]
      .filter((m) => (m.state ?? "active") === "active")
      .map((m) => m.id)
      .sort(compareIds);
  }

  /**
   * The active members with room for a new replica (their disk not reported full: set-disk),
   * in id order: where a new shard, a repair or a rebalancing move puts one.
   */
  roomyMembers(): string[] {
    return this.activeMembers().filter((id) => this.hasRoom(id));
  }

  /** Member `id` is active and has not reported its disk full (set-disk). */
  hasRoom(id: string): boolean {
    return this.stateOf(id) === "active" && this.members.get(id)?.diskFull !== true;
  }

  /**
   * How many shards the meta group places on each member (every member listed, 0 or more),
   * counted once for this state (the allocator asks at every pass).
   */
  replicaCounts(): ReadonlyMap<string, number> {
    if (this.#replicaCounts === undefined) {
      const counts = new Map([...this.members.keys()].map((id) => [id, 0]));
      for (const shard of this.shards.keys()) {
        for (const n of this.nodesOf(shard)) counts.set(n, (counts.get(n) ?? 0) + 1);
      }
      this.#replicaCounts = counts;
    }
    return this.#replicaCounts;
  }

  /**
   * Whether member `node` keeps a replica of `shard`: it is one of the shard's nodes, or the
   * shard is the meta group (0) and the member keeps a copy of it (isMetaHolder: a learner
   * when it is not a voter). A node takes a shard it holds no state for only then
   * (MultiRaftOptions.acceptsReplica).
   */
  keepsReplica(node: string, shard: number): boolean {
    if (shard === 0 && isMetaHolder(this.stateOf(node))) return true;
    return this.nodesOf(shard).includes(node);
  }

  /**
   * The fewest nodes any created shard but the meta group (0) is placed on (Infinity when
   * there is none), found once for this state: the allocator's test for a shard below its
   * factor, on every pass.
   */
  fewestReplicas(): number {
    if (this.#fewestReplicas === undefined) {
      let fewest = Number.POSITIVE_INFINITY;
      for (const shard of this.shards.keys()) {
        if (shard !== 0) fewest = Math.min(fewest, this.nodesOf(shard).length);
      }
      this.#fewestReplicas = fewest;
    }
    return this.#fewestReplicas;
  }

  /** Whether a move of `shard` is under way (its group's voters are not yet its nodes). */
  isMoving(shard: number): boolean {
    return this.placements.get(shard)?.moving === true;
  }

  /** The shards moving (isMoving), in id order, found once for this state. */
  movingShards(): readonly number[] {
    this.#moving ??= [...this.placements]
      .filter(([, p]) => p.moving)
      .map(([shard]) => shard)
      .sort((a, b) => a - b);
    return this.#moving;
  }

  /** How many shards are moving (isMoving). */
  movingCount(): number {
    return this.movingShards().length;
  }

  /**
   * How many created shards, the meta group (0) included, are not yet placed on
   * `replication_factor` active members (capped at the active and dead members: a cluster
   * founded on fewer members than the factor is whole, one that lost one is not): one of its
   * nodes is dead, decommissioning, decommissioned or removed, or it has fewer nodes (a shard
   * created while a member is dead is placed on the active ones only). A repair or a
   * decommission's move that has started places the shard on its new nodes: it counts as
   * moving (movingCount) until its group has them. Counted once for this state.
   */
  underReplicatedCount(): number {
    if (this.#underReplicated === undefined) {
      let members = 0;
      for (const m of this.members.values()) {
        const state = m.state ?? "active";
        if (state === "active" || state === "dead") members++;
      }
      const want = Math.min(this.replicationFactor, members);
      let count = 0;
      for (const shard of this.shards.keys()) {
        const nodes = this.nodesOf(shard);
        if (nodes.length < want || nodes.some((n) => this.stateOf(n) !== "active")) count++;
      }
      this.#underReplicated = count;
    }
    return this.#underReplicated;
  }

  /** The replica id member `node` has now (its node id when it is not a member). */
  replicaOf(node: string): string {
    return replicaIdOf(node, this.members.get(node)?.incarnation);
  }

  /** The replica ids of shard `shard`'s replicas now (each node's current one), in rank order. */
  replicasNow(shard: number): string[] {
    return this.nodesOf(shard).map((node) => this.replicaOf(node));
  }

  /** The nodes of shard `shard`'s replicas, in rank order; empty when it is not created. */
  nodesOf(shard: number): string[] {
    const placed = this.placements.get(shard);
    if (placed !== undefined) return [...placed.nodes];
    return (this.shards.get(shard) ?? []).map(nodeOfReplica);
  }

  /**
   * Whether `replica` is one of its node's retired incarnations: gone for good. A replica id
   * that is neither the node's current one nor retired is newer than this state.
   */
  isRetired(replica: string): boolean {
    const m = this.members.get(nodeOfReplica(replica));
    return m?.retired?.some((r) => replicaIdOf(m.id, r) === replica) === true;
  }

  #bootstrap(cmd: Extract<MetaCommand, { op: "bootstrap" }>): MetaApplyResult {
    if (this.clusterId !== null)
      return this.#same({ kind: "already-bootstrapped", clusterId: this.clusterId });
    const members = new Map(cmd.members.map((m) => [m.id, canonicalMember(m)] as const));
    const shard0 = cmd.members.map((m) => replicaIdOf(m.id, m.incarnation));
    const state = new MetaState(
      cmd.clusterId,
      cmd.totalShards,
      cmd.replicationFactor,
      members,
      DenseMap.of([[0, shard0]]),
    );
    return {
      state,
      outcome: { kind: "bootstrapped", clusterId: cmd.clusterId },
      records: [
        state.#clusterRecord(),
        ...[...members.values()].map(memberRecord),
        shardRecord(0, shard0),
      ],
    };
  }

  #createShard(shard: number, replicas: readonly string[]): MetaApplyResult {
    if (this.clusterId === null) return this.#rejected("the cluster is not bootstrapped");
    const existing = this.shards.get(shard);
    if (existing !== undefined)
      return this.#same({ kind: "shard-exists", shard, replicas: existing });
    if (shard >= this.totalShards)
      return this.#rejected(`shard ${shard} is not in [1, ${this.totalShards})`);
    const unknown = replicas.find((r) => this.stateOf(r) !== "active");
    if (unknown !== undefined) return this.#rejected(`replica ${unknown} is not an active member`);
    const want = Math.min(this.replicationFactor, this.activeMembers().length);
    if (replicas.length !== want)
      return this.#rejected(`${replicas.length} replicas for shard ${shard}, expected ${want}`);
    // The initial voters are frozen here, with each member's incarnation as of this entry.
    const copy = replicas.map((r) => this.replicaOf(r));
    const shards = this.shards.clone();
    shards.set(shard, copy);
    const state = this.#with(this.members, shards);
    state.#step = { from: this.#serial, shard };
    return {
      state,
      outcome: { kind: "shard-created", shard, replicas: copy },
      records: [shardRecord(shard, copy)],
    };
  }

  #setMember(m: MetaMember): MetaApplyResult {
    if (this.clusterId === null) return this.#rejected("the cluster is not bootstrapped");
    const previous = this.members.get(m.id);
    // A recorded incarnation is never forgotten nor replaced here: a node that lost its data
    // directory must not pass for the member that had it.
    if (
      previous?.incarnation !== undefined &&
      m.incarnation !== undefined &&
      m.incarnation !== previous.incarnation
    ) {
      return this.#rejected(
        `member ${m.id} is recorded as incarnation ${previous.incarnation}, not ${m.incarnation}`,
      );
    }
    const incarnation = m.incarnation ?? previous?.incarnation;
    const member = canonicalMember({
      ...m,
      ...(incarnation === undefined ? {} : { incarnation }),
      ...(previous?.retired === undefined ? {} : { retired: previous.retired }),
      ...(previous?.state === undefined ? {} : { state: previous.state }),
      ...(previous?.diskFull === undefined ? {} : { diskFull: previous.diskFull }),
      ...(previous?.build === undefined ? {} : { build: previous.build }),
    });
    if (
      previous !== undefined &&
      previous.rpcAddr === member.rpcAddr &&
      previous.httpAddr === member.httpAddr &&
      previous.incarnation === member.incarnation
    )
      return this.#same({ kind: "member-unchanged", member: previous });
    const members = new Map(this.members);
    members.set(member.id, member);
    return {
      state: this.#with(members, this.shards),
      outcome:
        previous === undefined
          ? { kind: "member-added", member }
          : { kind: "member-updated", member, previous },
      records: [memberRecord(member)],
    };
  }

  #rejoin(id: string, incarnation: string): MetaApplyResult {
    if (this.clusterId === null) return this.#rejected("the cluster is not bootstrapped");
    const previous = this.members.get(id);
    if (previous === undefined) return this.#rejected(`${id} is not a member`);
    // A rejoin names no build: the new node's is 1 until it reports its own.
    if (startsNewLife(previous, incarnation)) {
      const addresses = { rpcAddr: previous.rpcAddr, httpAddr: previous.httpAddr };
      return this.#newLife(previous, addresses, incarnation);
    }
    if (previous.state === "removed")
      return this.#same({ kind: "rejected", reason: removedReason(id), removed: true });
    if (previous.state === "decommissioned" && previous.incarnation === incarnation) {
      // Its node, down while it was decommissioned, restarted on its data directory: that
      // directory's meta state still says active, and only this answer tells it otherwise.
      const reason = `member ${id} was decommissioned (while its node was down): this data directory may not serve again. To bring the machine back, start it on an empty data directory`;
      return this.#same({ kind: "rejected", reason, decommissioned: true });
    }
    if (previous.incarnation === incarnation)
      return this.#same({ kind: "member-unchanged", member: previous });
    const retired = previous.retired ?? [];
    if (retired.includes(incarnation)) {
      const reason = `incarnation ${incarnation} of ${id} is retired`;
      return this.#same({ kind: "rejected", reason, retired: true });
    }
    const retiredNow =
      previous.incarnation === undefined ? retired : [...retired, previous.incarnation];
    const limit = this.#rejoinLimit(id, retiredNow);
    if (limit !== null) return this.#same(limit);
    // A new data directory (the old one was lost): its disk reports afresh.
    const member = canonicalMember({
      ...withRoom(previous),
      incarnation,
      retired: retiredNow,
    });
    const members = new Map(this.members);
    members.set(id, member);
    return {
      state: this.#with(members, this.shards),
      outcome: { kind: "member-updated", member, previous },
      records: [memberRecord(member)],
    };
  }

  #preferLeader(shard: number, node: string): MetaApplyResult {
    if (this.clusterId === null) return this.#rejected("the cluster is not bootstrapped");
    if (!this.shards.has(shard)) return this.#rejected(`shard ${shard} is not created`);
    if (!this.nodesOf(shard).includes(node))
      return this.#rejected(`${node} is not a replica of shard ${shard}`);
    if (this.preferredLeader(shard) === node)
      return this.#same({ kind: "leader-unchanged", shard, node });
    const leaders = new Map(this.leaders);
    leaders.set(shard, node);
    return {
      state: this.#with(this.members, this.shards, leaders),
      outcome: { kind: "leader-preferred", shard, node },
      records: [leaderRecord(shard, node)],
    };
  }

  #join(m: MetaMember): MetaApplyResult {
    if (this.clusterId === null) return this.#rejected("the cluster is not bootstrapped");
    const tooOld = this.#tooOld(m.id, m.build ?? 1);
    if (tooOld !== null) return this.#same(tooOld);
    const previous = this.members.get(m.id);
    if (
      previous !== undefined &&
      m.incarnation !== undefined &&
      startsNewLife(previous, m.incarnation)
    )
      return this.#newLife(previous, m, m.incarnation);
    if (previous?.state === "removed")
      return this.#same({ kind: "rejected", reason: removedReason(m.id), removed: true });
    if (previous !== undefined) {
      if (previous.incarnation === m.incarnation)
        return this.#same({ kind: "member-unchanged", member: previous });
      return this.#rejected(
        `node id ${m.id} is already a member (incarnation ${previous.incarnation ?? "none"}); a member rejoins, it does not join`,
      );
    }
    const member = canonicalMember({ ...m, state: "joining" });
    const members = new Map(this.members);
    members.set(member.id, member);
    return {
      state: this.#with(members, this.shards),
      outcome: { kind: "member-added", member },
      records: [memberRecord(member)],
    };
  }

  /**
   * Member `previous`, decommissioned or removed, comes back as a new node under its id: a data
   * directory it never had (startsNewLife). It joins again (`joining`, at `addresses`' rpc and
   * http addresses), and its last incarnation is retired with the earlier ones, so nothing of
   * its old life (a replica id, a copy of its data directory) ever votes or serves again: the
   * identity the groups know is the node id and its incarnation (src/cluster/replica.ts), not
   * the id alone. What a StatefulSet's pod needs once scaled down and up again, its name reused.
   */
  #newLife(
    previous: MetaMember,
    addresses: Pick<MetaMember, "rpcAddr" | "httpAddr" | "build">,
    incarnation: string,
  ): MetaApplyResult {
    const retired = [...(previous.retired ?? []), previous.incarnation as string];
    const limit = this.#rejoinLimit(previous.id, retired);
    if (limit !== null) return this.#same(limit);
    const member = canonicalMember({
      id: previous.id,
      rpcAddr: addresses.rpcAddr,
      httpAddr: addresses.httpAddr,
      incarnation,
      retired,
      state: "joining",
      ...(addresses.build === undefined ? {} : { build: addresses.build }),
    });
    const members = new Map(this.members);
    members.set(member.id, member);
    return {
      state: this.#with(members, this.shards),
      outcome: { kind: "member-updated", member, previous },
      records: [memberRecord(member)],
    };
  }

  /**
   * The refusal of a rejoin or new life that would leave member `id` with `retired` retired
   * incarnations, past MAX_RETIRED_INCARNATIONS (from VERSION_REJOIN_LIMIT on), or null.
   */
  #rejoinLimit(id: string, retired: readonly string[]): MetaOutcome | null {
    if (this.version < VERSION_REJOIN_LIMIT || retired.length <= MAX_RETIRED_INCARNATIONS)
      return null;
    return {
      kind: "rejected",
      reason: `member ${id} has ${retired.length - 1} retired incarnations, the most a member keeps (${MAX_RETIRED_INCARNATIONS}): its data directory was replaced that many times. Start this node under another node id (and remove member ${id} once it is dead: cairn node remove), after finding why its data directory is lost`,
      rejoinLimit: true,
    };
  }

  #setState(id: string, to: MemberState, expected?: MemberState): MetaApplyResult {
    if (this.clusterId === null) return this.#rejected("the cluster is not bootstrapped");
    const previous = this.members.get(id);
    if (previous === undefined) return this.#rejected(`${id} is not a member`);
    const from = previous.state ?? "active";
    if (from === to) return this.#same({ kind: "state-unchanged", id, state: to });
    if (expected !== undefined && expected !== from && this.version >= VERSION_MOVE_ORIGIN) {
      return this.#rejected(
        `member ${id} is ${from}, not ${expected}: the change to ${to} is stale`,
      );
    }
    if (!TRANSITIONS[from].includes(to)) {
      const allowed = TRANSITIONS[from].join(", ") || "none: it is final";
      return this.#rejected(
        `member ${id} is ${from}: it cannot become ${to} (allowed: ${allowed})`,
      );
    }
    if (from === "decommissioning" && to === "dead" && this.version >= VERSION_DECOMMISSION_STAYS) {
      return this.#rejected(
        `member ${id} is decommissioning: it stays so however long it is unreachable (its replicas move off it all the same)`,
      );
    }
    if (to === "decommissioned" || to === "removed") {
      const held = [...this.shards.keys()].filter((s) => this.nodesOf(s).includes(id));
      if (held.length > 0) {
        return this.#rejected(
          `member ${id} still holds replicas of ${held.length} shard(s) (first: ${held[0]}); they must move off it first`,
        );
      }
      const needed = this.version >= VERSION_MOVE_ORIGIN ? this.movingOff(id) : undefined;
      if (needed !== undefined) {
        return this.#rejected(
          `shard ${needed}'s move off member ${id} is under way: its group may still count ${id} as a voter until the move is settled`,
        );
      }
    }
    const member = canonicalMember({ ...previous, state: to });
    const members = new Map(this.members);
    members.set(id, member);
    return {
      state: this.#with(members, this.shards),
      outcome: { kind: "state-changed", id, from, to },
      records: [memberRecord(member)],
    };
  }

  #setDisk(id: string, full: boolean): MetaApplyResult {
    if (this.clusterId === null) return this.#rejected("the cluster is not bootstrapped");
    const previous = this.members.get(id);
    if (previous === undefined) return this.#rejected(`${id} is not a member`);
    if (previous.state === "removed")
      return this.#same({ kind: "rejected", reason: removedReason(id), removed: true });
    if ((previous.diskFull === true) === full)
      return this.#same({ kind: "disk-unchanged", id, full });
    const member = canonicalMember(full ? { ...previous, diskFull: true } : withRoom(previous));
    const members = new Map(this.members);
    members.set(id, member);
    return {
      state: this.#with(members, this.shards),
      outcome: { kind: "disk-changed", id, full },
      records: [memberRecord(member)],
    };
  }

  /** Member `id` reports its build's highest cluster version. */
  #setBuild(id: string, build: number): MetaApplyResult {
    if (this.clusterId === null) return this.#rejected("the cluster is not bootstrapped");
    const previous = this.members.get(id);
    if (previous === undefined) return this.#rejected(`${id} is not a member`);
    if (previous.state === "removed")
      return this.#same({ kind: "rejected", reason: removedReason(id), removed: true });
    const tooOld = this.#tooOld(id, build);
    if (tooOld !== null) return this.#same(tooOld);
    if ((previous.build ?? 1) === build)
      return this.#same({ kind: "member-unchanged", member: previous });
    const member = canonicalMember({ ...previous, build });
    const members = new Map(this.members);
    members.set(id, member);
    return {
      state: this.#with(members, this.shards),
      outcome: { kind: "member-updated", member, previous },
      records: [memberRecord(member)],
    };
  }

  /**
   * The cluster version becomes `version`, if every member that may serve again runs a build
   * that has it (lowestBuild): never lowered, so a stale raise changes nothing.
   */
  #setVersion(version: number): MetaApplyResult {
    if (this.clusterId === null) return this.#rejected("the cluster is not bootstrapped");
    if (version <= this.version)
      return this.#same({ kind: "version-unchanged", version: this.version });
    const lowest = this.lowestBuild();
    if (version > lowest.build)
      return this.#rejected(
        `member ${lowest.id} runs cluster versions up to ${lowest.build}: the cluster cannot run version ${version} yet`,
      );
    const state = this.#with(this.members, this.shards, this.leaders, this.placements, version);
    return {
      state,
      outcome: { kind: "version-changed", from: this.version, to: version },
      records: [state.#clusterRecord()],
    };
  }

  /**
   * The lowest build among the members that may serve again (all but decommissioned and
   * removed ones: a new node under one's id joins with its own build), and one member that runs
   * it; the cluster version may be raised to `build`. A cluster without such a member: this
   * state's version.
   */
  lowestBuild(): { readonly id: string; readonly build: number } {
    let lowest: { id: string; build: number } | null = null;
    for (const m of this.members.values()) {
      if (m.state === "decommissioned" || m.state === "removed") continue;
      const build = m.build ?? 1;
      if (lowest === null || build < lowest.build || (build === lowest.build && m.id < lowest.id))
        lowest = { id: m.id, build };
    }
    return lowest ?? { id: "", build: this.version };
  }

  /** A refusal when a build running versions up to `build` is older than the cluster's version. */
  #tooOld(id: string, build: number): MetaOutcome | null {
    if (build >= this.version) return null;
    return {
      kind: "rejected",
      reason: `${id} runs a build with cluster versions up to ${build}, and the cluster runs version ${this.version}: run a build that has it (docs/operations.md, "Upgrading")`,
      tooOld: true,
    };
  }

  #moveShard(shard: number, from: readonly string[], nodes: readonly string[]): MetaApplyResult {
    if (this.clusterId === null) return this.#rejected("the cluster is not bootstrapped");
    if (!this.shards.has(shard)) return this.#rejected(`shard ${shard} is not created`);
    const now = this.nodesOf(shard);
    if (!sameList(now, from)) {
      return this.#rejected(
        `shard ${shard} is on ${now.join(", ")}, not ${from.join(", ")}: the move is stale`,
      );
    }
    const added = nodes.filter((n) => !now.includes(n));
    const removed = now.filter((n) => !nodes.includes(n));
    if (added.length > 1 || removed.length > 1 || added.length + removed.length === 0) {
      return this.#rejected(
        `a move adds at most one node and removes at most one (adds ${added.length}, removes ${removed.length})`,
      );
    }
    const inactive = added.find((n) => this.stateOf(n) !== "active");
    if (inactive !== undefined) return this.#rejected(`node ${inactive} is not an active member`);
    // The allocator targets no full member; a move it chose before the member's set-disk
    // committed is refused here, so that no move lands on a full member (it retries elsewhere).
    const full = added.find((n) => this.members.get(n)?.diskFull === true);
    if (full !== undefined)
      return this.#rejected(`node ${full}'s disk is nearly full: it takes no new replica`);
    const unknown = nodes.find((n) => !this.members.has(n));
    if (unknown !== undefined) return this.#rejected(`node ${unknown} is not a member`);
    const placements = this.placements.clone();
    const was = this.#movedOff(shard, now, nodes);
    const placement =
      was === undefined
        ? { nodes: [...nodes], moving: true }
        : { nodes: [...nodes], moving: true, was };
    placements.set(shard, placement);
    const replicas = this.shards.get(shard) ?? [];
    const state = this.#with(this.members, this.shards, this.leaders, placements);
    state.#derive(this, shard, now, placement.nodes, true);
    return {
      state,
      outcome: { kind: "shard-moved", shard, nodes: placement.nodes },
      records: [shardRecord(shard, replicas, placement)],
    };
  }

  /**
   * What a move of `shard` from `now` to `nodes` records as `was` (ShardPlacement): the nodes
   * it takes out, with those a move under way took out, but none of `nodes`. Undefined before
   * VERSION_MOVE_ORIGIN, or when redirecting a move begun before it (not known).
   */
  #movedOff(
    shard: number,
    now: readonly string[],
    nodes: readonly string[],
  ): readonly string[] | undefined {
    if (this.version < VERSION_MOVE_ORIGIN) return undefined;
    const placed = this.placements.get(shard);
    const before = placed?.moving === true ? placed.was : [];
    if (before === undefined) return undefined;
    return [...new Set([...before, ...now])].filter((n) => !nodes.includes(n)).sort(compareIds);
  }

  /**
   * A moving shard whose group may still count member `id` as a voter (ShardPlacement.was), or
   * whose move began before VERSION_MOVE_ORIGIN (not known: any member may be one); undefined
   * when none is.
   */
  movingOff(id: string): number | undefined {
    for (const shard of this.movingShards()) {
      const was = this.placements.get(shard)?.was;
      if (was === undefined || was.includes(id)) return shard;
    }
    return undefined;
  }

  #settleShard(shard: number, nodes: readonly string[]): MetaApplyResult {
    if (this.clusterId === null) return this.#rejected("the cluster is not bootstrapped");
    const placed = this.placements.get(shard);
    if (placed === undefined || !placed.moving || !sameList(placed.nodes, nodes))
      return this.#same({ kind: "shard-unchanged", shard });
    const placements = this.placements.clone();
    const placement = { nodes: placed.nodes, moving: false };
    placements.set(shard, placement);
    const state = this.#with(this.members, this.shards, this.leaders, placements);
    state.#derive(this, shard, placed.nodes, placed.nodes, false);
    return {
      state,
      outcome: { kind: "shard-settled", shard },
      records: [shardRecord(shard, this.shards.get(shard) ?? [], placement)],
    };
  }

  /**
   * This state is `previous` with `shard` moved from nodes `was` to `now`, moving or not, and
   * nothing else changed: what `previous` counted (replicaCounts, movingShards, fewestReplicas,
   * while the shard keeps as many nodes) is updated here
   * rather than counted again over every shard. A move or its settling is applied on every
   * node a few times a second during a rebalance, and each state was counted whole (1,024
   * shards) by the member view and the allocator.
   */
  #derive(
    previous: MetaState,
    shard: number,
    was: readonly string[],
    now: readonly string[],
    moving: boolean,
  ): void {
    this.#step = { from: previous.#serial, shard };
    const counts = previous.#replicaCounts;
    if (counts !== undefined) {
      const next = new Map(counts);
      for (const n of was) next.set(n, (next.get(n) ?? 0) - 1);
      for (const n of now) next.set(n, (next.get(n) ?? 0) + 1);
      this.#replicaCounts = next;
    }
    if (previous.#fewestReplicas !== undefined && was.length === now.length)
      this.#fewestReplicas = previous.#fewestReplicas;
    const list = previous.#moving;
    if (list !== undefined) {
      const without = list.filter((s) => s !== shard);
      if (moving) {
        const at = without.findIndex((s) => s > shard);
        without.splice(at < 0 ? without.length : at, 0, shard);
      }
      this.#moving = without;
    }
  }

  /**
   * The shards whose entry (initial voters, placement) may differ between `previous` and this
   * state: none when they are the same state, the one shard when apply made this state from
   * `previous` by creating, moving or settling it (nothing else changed), else null (anything
   * may have: go over every shard). What a node redoes for each meta state of a rebalance
   * (several a second) is then one shard's work, not 1,024's.
   */
  shardsChangedSince(previous: MetaState): readonly number[] | null {
    if (previous === this) return [];
    const step = this.#step;
    return step !== undefined && step.from === previous.#serial ? [step.shard] : null;
  }

  #with(
    members: ReadonlyMap<string, MetaMember>,
    shards: ReadonlyDenseMap<readonly string[]>,
    leaders: ReadonlyMap<number, string> = this.leaders,
    placements: ReadonlyDenseMap<ShardPlacement> = this.placements,
    version: number = this.version,
  ): MetaState {
    return new MetaState(
      this.clusterId,
      this.totalShards,
      this.replicationFactor,
      members,
      shards,
      leaders,
      placements,
      version,
    );
  }

  #same(outcome: MetaOutcome): MetaApplyResult {
    return { state: this, outcome, records: [] };
  }

  #rejected(reason: string): MetaApplyResult {
    return this.#same({ kind: "rejected", reason });
  }

  #clusterRecord(): MetaRecord {
    return {
      key: enc.encode(CLUSTER_KEY),
      // Version 1 is not written: the record a build before versions wrote.
      value: encodeJson({
        clusterId: this.clusterId,
        totalShards: this.totalShards,
        replicationFactor: this.replicationFactor,
        ...(this.version > 1 ? { version: this.version } : {}),
      }),
    };
  }

  /** Every record of this state (what `load` needs to rebuild it), in key order. */
  records(): MetaRecord[] {
    if (this.clusterId === null) return [];
    const out = [this.#clusterRecord()];
    for (const m of this.view().members) out.push(memberRecord(m));
    for (const s of this.view().shards)
      out.push(shardRecord(s.shard, s.replicas, this.placements.get(s.shard)));
    for (const l of this.view().leaders) out.push(leaderRecord(l.shard, l.node));
    // Keys are ASCII (ids are), so code-unit order is byte order.
    return out.sort((a, b) => compareIds(dec.decode(a.key), dec.decode(b.key)));
  }

  view(): MetaStateView {
    return {
      clusterId: this.clusterId,
      totalShards: this.totalShards,
      replicationFactor: this.replicationFactor,
      version: this.version,
      members: [...this.members.values()]
        .sort((a, b) => compareIds(a.id, b.id))
        .map(canonicalMember),
      shards: [...this.shards.entries()]
        .sort((a, b) => a[0] - b[0])
        .map(([shard, replicas]) => ({ shard, replicas: [...replicas] })),
      leaders: [...this.leaders.entries()]
        .sort((a, b) => a[0] - b[0])
        .map(([shard, node]) => ({ shard, node })),
      placements: [...this.placements.entries()]
        .sort((a, b) => a[0] - b[0])
        .map(([shard, p]) =>
          p.was === undefined
            ? { shard, nodes: [...p.nodes], moving: p.moving }
            : { shard, nodes: [...p.nodes], moving: p.moving, was: [...p.was] },
        ),
    };
  }

  equals(other: MetaState): boolean {
    return JSON.stringify(this.view()) === JSON.stringify(other.view());
  }
}

function memberKeyText(id: string): string {
  return MEMBER_KEY + id;
}

function shardKeyText(shard: number): string {
  return SHARD_KEY + String(shard).padStart(SHARD_DIGITS, "0");
}

function leaderKeyText(shard: number): string {
  return LEADER_KEY + String(shard).padStart(SHARD_DIGITS, "0");
}

function leaderRecord(shard: number, node: string): MetaRecord {
  return { key: enc.encode(leaderKeyText(shard)), value: encodeJson({ node }) };
}

function memberRecord(m: MetaMember): MetaRecord {
  return { key: enc.encode(memberKeyText(m.id)), value: encodeJson(canonicalMember(m)) };
}

function shardRecord(
  shard: number,
  replicas: readonly string[],
  placement?: ShardPlacement,
): MetaRecord {
  const value =
    placement === undefined
      ? { replicas }
      : placement.moving
        ? placement.was === undefined
          ? { replicas, nodes: placement.nodes, moving: true }
          : { replicas, nodes: placement.nodes, moving: true, was: placement.was }
        : { replicas, nodes: placement.nodes };
  return { key: enc.encode(shardKeyText(shard)), value: encodeJson(value) };
}

function removedReason(id: string): string {
  return `node id ${id} was removed from the cluster for good, and this node's data directory is not a new one: it may not serve again. To join under this id again, start the node on an empty data directory (a new node), or use another --node-id`;
}

/**
 * Whether a node asking to join or rejoin as member `previous` with data directory
 * `incarnation` is a new node under a retired member's id: the member was decommissioned or
 * removed (it holds no replica: both states require it), its incarnation is recorded (so an old
 * copy of its data directory can be told apart), and `incarnation` is none it ever had.
 */
export function startsNewLife(previous: MetaMember, incarnation: string): boolean {
  return (
    (previous.state === "decommissioned" || previous.state === "removed") &&
    previous.incarnation !== undefined &&
    incarnation !== previous.incarnation &&
    previous.retired?.includes(incarnation) !== true
  );
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

interface ClusterRecord {
  readonly clusterId: string;
  readonly totalShards: number;
  readonly replicationFactor: number;
  readonly version: number;
}

function parseClusterRecord(key: string, raw: unknown): ClusterRecord {
  if (
    !isObject(raw) ||
    unknownFields(raw, ["clusterId", "totalShards", "replicationFactor", "version"]) !== null
  )
    throw malformedRecord(key, "not a cluster record");
  const { clusterId, totalShards, replicationFactor, version = 1 } = raw;
  if (
    typeof clusterId !== "string" ||
    typeof totalShards !== "number" ||
    typeof replicationFactor !== "number" ||
    typeof version !== "number"
  )
    throw malformedRecord(key, "bad field types");
  const problem =
    checkCluster(clusterId, totalShards, replicationFactor) ?? checkVersion(version, "version");
  if (problem !== null) throw malformedRecord(key, problem);
  return { clusterId, totalShards, replicationFactor, version };
}

function parseShardRecord(
  key: string,
  raw: unknown,
): { replicas: readonly string[]; placement?: ShardPlacement } {
  if (!isObject(raw) || unknownFields(raw, ["replicas", "nodes", "moving", "was"]) !== null)
    throw malformedRecord(key, "not a shard record");
  const { nodes, moving, was } = raw;
  let placement: ShardPlacement | undefined;
  if (nodes !== undefined) {
    if (
      !isStringArray(nodes) ||
      nodes.length === 0 ||
      nodes.some((n) => !NODE_ID.test(n)) ||
      duplicate(nodes, "node") !== null ||
      (moving !== undefined && moving !== true)
    )
      throw malformedRecord(key, "bad placement");
    if (was === undefined) {
      placement = { nodes, moving: moving === true };
    } else if (
      moving !== true ||
      !isStringArray(was) ||
      was.some((n) => !NODE_ID.test(n) || nodes.includes(n)) ||
      duplicate(was, "node") !== null
    ) {
      throw malformedRecord(key, "bad placement");
    } else {
      placement = { nodes, moving: true, was };
    }
  } else if (moving !== undefined || was !== undefined) {
    throw malformedRecord(key, "moving without nodes");
  }
  const replicas = raw["replicas"];
  if (!Array.isArray(replicas) || !replicas.every((r) => typeof r === "string"))
    throw malformedRecord(key, "replicas is not an array of strings");
  const ids = replicas as string[];
  if (
    ids.length === 0 ||
    ids.some((r) => !REPLICA_ID.test(r)) ||
    duplicate(ids.map(nodeOfReplica), "replica") !== null
  )
    throw malformedRecord(key, "bad replica list");
  return placement === undefined ? { replicas: ids } : { replicas: ids, placement };
}

function decodeKey(key: Uint8Array): string {
  try {
    return dec.decode(key);
  } catch {
    throw malformedRecord(
      Array.from(key, (b) => b.toString(16).padStart(2, "0")).join(""),
      "key is not UTF-8",
    );
  }
}

function decodeRecordJson(key: string, value: Uint8Array): unknown {
  try {
    return decodeJson(value);
  } catch (err) {
    throw malformedRecord(key, err instanceof Error ? err.message : String(err));
  }
}

// ---------------------------------------------------------------------------------------------
// Placement and bootstrap decisions

/**
 * The replicas of `shard`: the `factor` members with the highest rendezvous weight (all of them
 * when fewer), highest first (the first is the preferred leader). The weight of a member is
 *
 *   xxhash64(u32 big-endian shard ‖ UTF-8 node id, seed 0)   (an unsigned 64-bit integer)
 *
 * with ties (never seen in practice) broken by the smaller id, so every process on every platform
 * ranks alike. Removing a member changes only the shards it held; adding one only those it joins.
 */
export function rendezvousReplicas(
  shard: number,
  memberIds: readonly string[],
  factor: number,
): string[] {
  if (!Number.isInteger(shard) || shard < 0 || shard >= MAX_SHARDS)
    throw new RangeError(`shard must be an integer in [0, 2^32), got ${shard}`);
  if (!Number.isInteger(factor) || factor < 0)
    throw new RangeError(`factor must be an integer ≥ 0, got ${factor}`);
  const dup = duplicate(memberIds, "member");
  if (dup !== null) throw new RangeError(dup);
  const ranked = memberIds.map((id) => ({ id, weight: rendezvousWeight(shard, id) }));
  ranked.sort((a, b) =>
    a.weight === b.weight ? compareIds(a.id, b.id) : a.weight > b.weight ? -1 : 1,
  );
  return ranked.slice(0, factor).map((r) => r.id);
}

/** The rendezvous weight of `nodeId` for `shard` (see rendezvousReplicas). */
export function rendezvousWeight(shard: number, nodeId: string): bigint {
  const id = enc.encode(nodeId);
  const buf = new Uint8Array(4 + id.length);
  new DataView(buf.buffer).setUint32(0, shard);
  buf.set(id, 4);
  return xxhash64(buf);
}

export interface BootstrapInput {
  /** This node, with its advertised addresses. */
  readonly self: MetaMember;
  /** `cluster.seed_nodes` as configured (the same list on every node). */
  readonly seedNodes: readonly string[];
  /** `cluster.bootstrap_expect`: members (this one included) to see before bootstrapping. */
  readonly bootstrapExpect: number;
  /** The cluster id this node stored durably, null if none. */
  readonly clusterId: string | null;
  /** The members SWIM shows alive (this node may or may not be among them). */
  readonly alive: readonly {
    readonly member: MetaMember;
    readonly clusterId: string | null;
    /** It advertises its own seed_nodes[0] too (its cluster view's first_seed). */
    readonly firstSeed?: boolean;
  }[];
}

export type BootstrapDecision =
  | { readonly voters: readonly MetaMember[]; readonly reason?: never }
  | { readonly voters: null; readonly reason: string };

/**
 * Whether this node founds the cluster now (design.md §5.1), and with which voters (every alive
 * member it sees, itself included, sorted by id; at most MAX_REPLICAS of them, itself and the
 * first by id: the others join as any node does). Only the node advertising the first seed
 * address may, once it sees `bootstrapExpect` members, and never while it or any member it sees
 * carries a cluster id: a seed restarted with a wiped data directory must rejoin, not found a
 * second cluster. Nor while another member it sees is a first seed too (nodes given their seeds
 * in different orders): each would found a cluster of its own, both on the same voters.
 * seed_nodes[0] must name the first seed's advertised rpc_addr: the same address however written
 * (sameAddress: `[::ffff:10.0.0.1]:7447` is `10.0.0.1:7447`, `localhost` a loopback address, a
 * name in any case), but names are not resolved. (Compared as written, a seed_nodes[0] in another
 * spelling made no node the first seed, and the cluster was never founded.)
 */
export function shouldBootstrap(input: BootstrapInput): BootstrapDecision {
  const first = input.seedNodes[0];
  if (first === undefined) return { voters: null, reason: "no seed nodes (single-node mode)" };
  if (input.clusterId !== null)
    return { voters: null, reason: `this node already belongs to cluster ${input.clusterId}` };
  if (!sameAddress(first, input.self.rpcAddr))
    return {
      voters: null,
      reason: `not the first seed: seed_nodes[0] is ${first}, this node advertises ${input.self.rpcAddr}`,
    };
  const seen = new Map<string, MetaMember>();
  for (const { member, clusterId, firstSeed } of input.alive) {
    if (clusterId !== null)
      return {
        voters: null,
        reason: `member ${member.id} already carries cluster id ${clusterId}: rejoin it instead`,
      };
    if (firstSeed === true && member.id !== input.self.id)
      return { voters: null, reason: anotherFirstSeed(`member ${member.id} at ${member.rpcAddr}`) };
    if (member.id !== input.self.id) seen.set(member.id, canonicalMember(member));
  }
  seen.set(input.self.id, canonicalMember(input.self));
  if (seen.size < input.bootstrapExpect)
    return {
      voters: null,
      reason: `waiting for members: ${seen.size} of bootstrap_expect ${input.bootstrapExpect} seen`,
    };
  // A shard's nodes number at most MAX_REPLICAS (a move's too): founded on more, the meta group
  // could never be moved or repaired when one died (17 pods of a StatefulSet started together).
  const others = [...seen.values()]
    .filter((m) => m.id !== input.self.id)
    .sort((a, b) => compareIds(a.id, b.id))
    .slice(0, MAX_REPLICAS - 1);
  return {
    voters: [canonicalMember(input.self), ...others].sort((a, b) => compareIds(a.id, b.id)),
  };
}

/** Why a first seed that found another does not found the cluster (shouldBootstrap). */
export function anotherFirstSeed(who: string): string {
  return `${who} advertises its own seed_nodes[0] too, and would found a cluster of its own: give every node the same seed_nodes, in the same order`;
}

// ---------------------------------------------------------------------------------------------
// Helpers

/** Code-unit order: the same in every JavaScript engine, unlike localeCompare. */
function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function encodeJson(value: unknown): Uint8Array {
  const body = enc.encode(JSON.stringify(value));
  const out = new Uint8Array(1 + body.length);
  out[0] = FORMAT_VERSION;
  out.set(body, 1);
  return out;
}

function decodeJson(data: Uint8Array): unknown {
  if (data.length === 0) throw new Error("empty");
  if (data[0] !== FORMAT_VERSION)
    throw new Error(
      `unknown format version ${data[0]} (written by a newer Cairn build? every member must run the same build: docs/operations.md, "Upgrading")`,
    );
  return JSON.parse(dec.decode(data.subarray(1)));
}

function isMemberState(v: unknown): v is MemberState {
  return typeof v === "string" && (MEMBER_STATES as readonly string[]).includes(v);
}

function isStringArray(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((x) => typeof x === "string");
}

function unknownFields(obj: Record<string, unknown>, allowed: readonly string[]): string | null {
  const extra = Object.keys(obj).find((k) => !allowed.includes(k));
  return extra === undefined ? null : `unknown field ${JSON.stringify(extra)}`;
}

function malformedCommand(why: string): CairnError {
  return new CairnError("CAIRN_ERR_MALFORMED_COMMAND", `malformed meta command: ${why}`);
}

function malformedRecord(key: string, why: string): CairnError {
  return new CairnError("CAIRN_ERR_MALFORMED_META", `malformed meta record ${key}: ${why}`);
}
