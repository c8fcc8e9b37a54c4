/**
 * Peers: messages for the groups, delivered to a group open here, opening one this node
 * replicates, held a while for a shard it may soon learn it replicates (replicasChanged), and
 * the transport's reports. Groups here are stand-ins that record what they are given.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type Message, nodeId } from "../../src/raft/index.ts";
import { encodeMetaCommand } from "../../src/cluster/index.ts";
import { encodeCommand, encodeMetaEntry } from "../../src/replication/commands.ts";
import { Peers } from "../../src/replication/multi-raft-peers.ts";
import type { ShardTable } from "../../src/replication/multi-raft-options.ts";
import type { ShardReplica } from "../../src/replication/shard.ts";
import { systemClock } from "../../src/replication/index.ts";

interface Group {
  id: number;
  role: string;
  storage: { conf: { voters: string[]; learners: string[] } };
  steps: Message[];
  reports: unknown[];
  enqueueStep(m: Message): void;
  enqueueReport(r: unknown): void;
}

function group(id: number, role = "follower", voters: string[] = []): Group {
  return {
    id,
    role,
    storage: { conf: { voters, learners: [] } },
    steps: [],
    reports: [],
    enqueueStep(m: Message) {
      this.steps.push(m);
    },
    enqueueReport(r: unknown) {
      this.reports.push(r);
    },
  };
}

const msg = (to: string, term = 1): Message =>
  ({ type: "heartbeat", from: nodeId("x"), to: nodeId(to), term }) as unknown as Message;

function harness(options: { replicates?: Set<number>; transport?: boolean } = {}) {
  /** What the observer heard of dropped appends: `from shard index reason`. */
  const malformed: string[] = [];
  /** Messages dropped past the held ones' bound: [from, shard]. */
  const heldDropped: [string, number][] = [];
  const replicates = options.replicates ?? new Set<number>();
  const table = new Map<number, Group>();
  const opening = new Map<number, Promise<ShardReplica>>();
  const dirty: number[] = [];
  const stale: [string, string][] = [];
  let now = 0;
  /** Shards whose replica here was removed (Wal.isDropped), and those being removed. */
  const dropped = new Set<number>();
  const removing = new Set<number>();
  /** Shards the placement now puts on this node (acceptsReplica). */
  const accepts = new Set<number>();
  const peers = new Peers({
    options: {
      ...(options.transport === false ? {} : { transport: { send() {}, flush() {} } }),
      onStaleReplica: (from, to) => stale.push([from, to]),
      acceptsReplica: (id) => accepts.has(id),
      observer: {
        malformedAppend: (from, shard, index, reason) =>
          malformed.push(`${from} ${shard} ${index} ${reason}`),
        heldMessageDropped: (from, shard) => heldDropped.push([from, shard]),
      },
    },
    shards: table as unknown as ShardTable,
    clock: { ...systemClock, now: () => now },
    replicaId: nodeId("n1"),
    totalShards: 8,
    stopped: () => false,
    closed: () => false,
    replicasOf: (id) => (replicates.has(id) ? ["n1", "n2"] : ["n2", "n3"]),
    wal: { isDropped: (id) => dropped.has(id) },
    removing: (id) => removing.has(id),
    // As the driver's: one opening per shard, in the table once opened.
    shard: (id) => {
      let p = opening.get(id);
      if (p === undefined) {
        p = Promise.resolve().then(() => {
          const g = group(id);
          table.set(id, g);
          return g as unknown as ShardReplica;
        });
        opening.set(id, p);
      }
      return p;
    },
    markDirty: (s) => dirty.push(s.id),
  });
  return {
    peers,
    table,
    dirty,
    stale,
    replicates,
    dropped,
    removing,
    accepts,
    malformed,
    heldDropped,
    advance: (ms: number) => (now += ms),
  };
}

const settle = () => new Promise((r) => setImmediate(r));

/** An append to n1 of one entry at index 7 holding `data`. */
function append(data: Uint8Array, type: "normal" | "conf-change" = "normal"): Message {
  return {
    type: "append",
    from: nodeId("n2"),
    to: nodeId("n1"),
    term: 2,
    prevIndex: 6,
    prevTerm: 2,
    entries: [{ index: 7, term: 2, type, data }],
    commit: 7,
    noReply: false,
  } as unknown as Message;
}

describe("Peers", () => {
  it("drops an append holding an entry that is no command this build applies, and says so", () => {
    // Applied, such an entry stops the node, and again at every restart as its log replays:
    // one append of eight bytes from a caller posing as the leader did it (a review of
    // 2026-12-06). The core never sees it; the group stalls here at worst.
    const h = harness();
    const g = group(3);
    h.table.set(3, g);
    const bad = [
      new Uint8Array([1, 1, 0, 0, 0, 0, 0, 0]), // a Put flagged with a version it lacks
      new Uint8Array([9, 0, 0, 0, 0, 0]), // an op no build has
      new Uint8Array([3, 0, 1, 0x7b]), // a meta command cut short
      new Uint8Array([3, 0, ...encodeMetaCommand({ op: "set-version", version: 2 }).slice(0, 3)]),
      new Uint8Array([2]),
    ];
    for (const data of bad) h.peers.receive("n2", [{ shard: 3, message: append(data) }]);
    assert.equal(g.steps.length, 0, "no malformed append reached the group");
    assert.equal(h.malformed.length, bad.length);
    assert.match(
      h.malformed[0] ?? "",
      /^n2 3 7 malformed KV command in the log: truncated version/,
    );
    // What a leader of this build writes is taken: a Put, a Delete, a meta command, a no-op,
    // and a membership change (the core checks those).
    const key = new TextEncoder().encode("k");
    const good = [
      append(encodeCommand({ op: "put", key, value: key })),
      append(encodeCommand({ op: "delete", key })),
      append(encodeMetaEntry({ op: "set-version", version: 2 })),
      append(new Uint8Array(0)),
      append(new TextEncoder().encode("add-learner n4"), "conf-change"),
    ];
    for (const m of good) h.peers.receive("n2", [{ shard: 3, message: m }]);
    assert.equal(g.steps.length, good.length);
    assert.equal(h.malformed.length, bad.length);
  });

  it("hands a message to its open group and marks it for the next round", () => {
    const h = harness();
    const g = group(3);
    h.table.set(3, g);
    h.peers.receive("n2", [{ shard: 3, message: msg("n1") }]);
    assert.equal(g.steps.length, 1);
    assert.deepEqual(h.dirty, [3]);
  });

  it("opens a shard this node replicates for its first message", async () => {
    const h = harness({ replicates: new Set([4]) });
    h.peers.receive("n2", [
      { shard: 4, message: msg("n1") },
      { shard: 4, message: msg("n1", 2) },
    ]);
    await settle();
    assert.deepEqual(
      h.table.get(4)?.steps.map((m) => m.term),
      [1, 2],
      "in the order they came",
    );
  });

  it("a shard whose replica was removed here opens again only where the placement puts it now", async () => {
    // An initial voter of shard 4 whose replica a move took away and replica GC removed: a
    // stray message of the old group does not bring it back; a move back onto this node does.
    const h = harness({ replicates: new Set([4]) });
    h.dropped.add(4);
    h.peers.receive("n2", [{ shard: 4, message: msg("n1") }]);
    await settle();
    assert.equal(h.table.has(4), false, "held, not opened");
    h.accepts.add(4);
    h.peers.replicasChanged();
    await settle();
    assert.equal(h.table.get(4)?.steps.length, 1);
    // While a replica is being removed its messages are dropped (lost, as on a network blip).
    h.removing.add(5);
    h.replicates.add(5);
    h.peers.receive("n2", [{ shard: 5, message: msg("n1") }]);
    await settle();
    assert.equal(h.table.has(5), false);
    h.removing.delete(5);
    h.peers.replicasChanged();
    await settle();
    assert.equal(h.table.has(5), false, "dropped, not held");
  });

  it("drops messages addressed to another incarnation of this node, and says so", () => {
    const h = harness();
    const g = group(3);
    h.table.set(3, g);
    h.peers.receive("n2", [{ shard: 3, message: msg("n1-old") }]);
    assert.equal(g.steps.length, 0);
    assert.deepEqual(h.stale, [["n2", "n1-old"]]);
  });

  it("holds a message for a shard not known here, and delivers it once this node replicates it", async () => {
    const h = harness();
    h.peers.receive("n2", [{ shard: 5, message: msg("n1") }]);
    assert.equal(h.table.has(5), false);
    h.peers.replicasChanged();
    assert.equal(h.table.has(5), false, "still not a replica: held on");
    h.replicates.add(5);
    h.peers.replicasChanged();
    await settle();
    assert.equal(h.table.get(5)?.steps.length, 1);
  });

  it("drops held messages after 3 s", async () => {
    const h = harness();
    h.peers.receive("n2", [{ shard: 5, message: msg("n1") }]);
    h.advance(3_000);
    h.peers.dropExpiredHeld();
    h.replicates.add(5);
    h.peers.replicasChanged();
    await settle();
    assert.equal(h.table.has(5), false);
  });

  it("holds at most 4,096 messages and 64 MiB of entries, copied out of the frames they came in", async () => {
    // A caller posing as a member (the peers' service takes one it does not know: handshake.ts)
    // sends appends for a shard this node does not replicate: each was held whole, for 3 s,
    // counted only by number, and its entries, views of the frame they came in, kept that
    // whole frame (up to 128 MiB) alive. 200 appends of 1 MiB held 200 MiB.
    const h = harness();
    const key = new TextEncoder().encode("k");
    const put = encodeCommand({ op: "put", key, value: new Uint8Array(1024 * 1024) });
    // A 4 MiB frame whose first bytes are the command: the entry is a view of it, as decoded.
    const frame = new Uint8Array(4 * 1024 * 1024);
    frame.set(put);
    const data = frame.subarray(0, put.length);
    for (let i = 0; i < 200; i++) h.peers.receive("n2", [{ shard: 5, message: append(data) }]);
    // And a flood of small ones past the count (shard 6).
    for (let i = 0; i < 5_000; i++) h.peers.receive("n2", [{ shard: 6, message: msg("n1") }]);
    h.replicates.add(5);
    h.replicates.add(6);
    h.peers.replicasChanged();
    await settle();
    const delivered = (h.table.get(5)?.steps ?? []) as Extract<Message, { type: "append" }>[];
    const bytes = delivered.reduce((n, m) => n + (m.entries[0]?.data.length ?? 0), 0);
    assert.ok(bytes <= 64 * 1024 * 1024, `${bytes} bytes of held entries`);
    assert.equal(delivered.length, 63, "a held message's entries count their bytes");
    assert.equal(delivered[0]?.entries[0]?.data.buffer.byteLength, put.length, "the frame kept");
    assert.equal(Buffer.compare(delivered[0]?.entries[0]?.data ?? new Uint8Array(0), put), 0);
    const small = h.table.get(6)?.steps.length ?? 0;
    assert.equal(small + delivered.length, 4_096, "held past the count");
    assert.equal(h.heldDropped.length, 200 - 63 + 5_000 - (4_096 - 63));
    assert.deepEqual(h.heldDropped[0], ["n2", 5]);
    // Once delivered, their room is free again.
    h.peers.receive("n2", [{ shard: 7, message: append(data) }]);
    h.replicates.add(7);
    h.peers.replicasChanged();
    await settle();
    assert.equal(h.table.get(7)?.steps.length, 1);
  });

  it("holds nothing without a transport, and ignores shards out of range", () => {
    const h = harness({ transport: false });
    h.peers.receive("n2", [
      { shard: 5, message: msg("n1") },
      { shard: 99, message: msg("n1") },
    ]);
    h.replicates.add(5);
    h.peers.replicasChanged();
    assert.equal(h.table.size, 0);
  });

  it("reports a peer unreachable to the groups led here that have a member on it", () => {
    const h = harness();
    const led = group(1, "leader", ["n1", "n2", "n3"]);
    const followed = group(2, "follower", ["n1", "n2", "n3"]);
    h.table.set(1, led);
    h.table.set(2, followed);
    h.peers.reportUnreachable("n2");
    assert.deepEqual(led.reports, [{ kind: "unreachable", to: "n2" }]);
    assert.deepEqual(followed.reports, []);
    assert.deepEqual(h.dirty, [1]);
  });
});
