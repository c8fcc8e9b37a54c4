/**
 * The simulation of the real multi-raft driver and WAL in `npm test`: many seeds (one node,
 * three, or four or five whose membership changes, drawn from the seed) must run clean, each
 * planted bug must be caught within 500 seeds, and a seed must replay exactly.
 *
 * DRIVER_SIM_SEEDS=N raises the number of seeds (default 40); DRIVER_SIM_CATCH_FROM_1=1 has the
 * searches for the planted bugs caught within the first 500 seeds start at seed 1 instead of at
 * the first seed known to catch each.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { driverReplayCommand } from "./sim/replay.ts";
import { runDriverSeed } from "./sim/simulator.ts";

const SEEDS = Number(process.env["DRIVER_SIM_SEEDS"] ?? "40");
/**
 * Seeds run with moves, and their sizes (the seeds above draw some too, and seeds 1156 on
 * four nodes and 3277 and 41820 on five are kept below): seed 9 on five nodes admits two,
 * kills one (declared dead, re-replicated, removed) and decommissions another, with leaders
 * handing their groups over and strikes mid-move; seed 2138 once killed a member while a wiped
 * node's group ran on two voters (the simulation's own rule was wrong: it lost a second copy).
 */
const MOVE_SEEDS: readonly (readonly [seed: number, nodes: number])[] = [
  [9, 5],
  [2138, 5],
];

/**
 * Seeds that once failed, each kept as a regression of what it found (docs/raft.md, "The
 * simulation of the real driver"; docs/perf-log/simulation.md).
 */
const REGRESSION_SEEDS: readonly { seeds: number[]; nodes: number; what: string }[] = [
  // A leader proposed a replica's promotion, lost its term before the entry committed, and led
  // again with a log that never reached the entry's index. Nothing answered the proposal, and
  // its sleeping group never ticked to time it out: the leader's replica steps (one under way a
  // group) waited on it for ever, and the shard's move with them.
  { seeds: [1156], nodes: 4, what: "a lost membership change hung while its group slept (moves)" },
  // A leader proposed a learner's promotion, was cut off before it committed, and led again
  // later, its log's index of the change now holding another leader's entry. The change was
  // answered only when that index applied as itself, so it waited out its 10 s deadline; the
  // move's old leader, placed elsewhere, refused the shard's reads meanwhile (naming the new
  // first replica, still a learner): no read of the shard for 10 s.
  { seeds: [3277], nodes: 5, what: "a lost membership change waited out its deadline (moves)" },
  // The final read of k0 went to shard 3's leader, whose engine had failed (an injected write
  // error under a flush); its next apply made the node fatal and the read was never answered.
  // The simulation's client waited on it until the liveness deadline, not noticing the death;
  // a new leader served the key about 200 ms later.
  { seeds: [41820], nodes: 5, what: "a final read was asked of a leader that died (moves)" },
  // A round whose only duty was to make a new group's founding entries durable wrote no record
  // and so skipped its sync; the engine flushed the first of them, a power cut took the WAL's
  // copy, and the replica came back as a group with one voter, itself.
  {
    seeds: [145, 263],
    nodes: 3,
    what: "a new group's founding went unsynced under an engine flush",
  },
  // With the commit broadcast deferred for every entry, a leader applied the conf change that
  // promoted a replica and was wiped before the followers learnt it was committed: they kept
  // the configuration before it, whose other voter was the wiped replica, and never elected.
  {
    seeds: [9365],
    nodes: 3,
    what: "a replaced replica's promotion reached no follower before its leader was wiped",
  },
  // One node: shard 2's founding write lost its hard state record to a torn tail and kept its
  // conf change. The group reopened with a log, no commit and no configuration, and never
  // elected itself: reads of its keys failed NOT_LEADER for ever after.
  {
    seeds: [2822],
    nodes: 1,
    what: "a power cut kept a new group's founding entries but not its hard state",
  },
  // Shard 1's leader proposed a learner, was cut off before it committed, and got a snapshot
  // past the change's index from the next leader; nothing answered the change until its 10 s
  // deadline, and the group's replica steps waited on it. Leading again, that node, placed off
  // the shard by a move, refused the shard's reads naming the new first replica, still a
  // learner.
  { seeds: [45904], nodes: 5, what: "a membership change was overtaken by a snapshot (moves)" },
  // The simulation's own rules: seed 45791 removed a shard's directory, decided before a wipe
  // took another replica of that shard, after it (the guard was not asked again at the
  // strike); seed 45896 killed for good a member recorded as an initial voter of a group no
  // node had opened yet, whose other recorded voter was a wiped node's old replica.
  {
    seeds: [45791, 45896],
    nodes: 5,
    what: "the simulation took a second copy of a shard (moves)",
  },
  // n1 restarted with shard 1's founding conf changes applied to index 1 of 3 (its engine had
  // flushed only the first): until its replay applied the other two, its configuration had one
  // voter, itself. The founding leader's heartbeat reached it first, and its answer tripped the
  // driver's check that a sole voter sends nothing: the node went fatal.
  {
    seeds: [63342],
    nodes: 4,
    what: "a restarted follower answered its leader before its replay applied the founding voters",
  },
  // The simulation's quorum check read the group's configuration before the Raft core took the
  // conf change just applied: a replica removed from shard 3 (the removal committed, but not
  // known to it) led the next term and applied its own removal; the check counted the voters
  // before it, among them the removed replica itself, no longer in the caught-up ledger.
  { seeds: [62479], nodes: 4, what: "a leader applied its own removal (moves)" },
  // Shard 1's leader chose its next replica step against voters n1 n2 n3 n4 while the removal
  // of n3 was committed but not yet applied (commit 12, applied 10): "remove n4", the move's
  // old replica, since every node of the shard (n2 n3 n1) had a voter. By the time the group
  // took the step the removal of n3 had applied: it left n1 and n2, n2 gone for good, and the
  // shard never had a leader again. A step now names the configuration it was chosen against.
  { seeds: [83474], nodes: 4, what: "a replica step chosen against a stale configuration (moves)" },
  // Shard 1 moved to n2 n4 n1 off n3, its leader; n2 died for good once n4 was a voter. n3,
  // leaving the shard, handed leadership to the shard's first node, n2, every pass: each
  // handover failed, and meanwhile n3 refused the shard's reads naming n2 (the meta group,
  // asleep under its dead leader n2 with no failure detector in this seed, never marked n2
  // dead to redirect the move). A leader leaving hands over to a caught-up, live voter only.
  { seeds: [90199], nodes: 5, what: "a leaving leader handed over to a dead node (moves)" },
  // n1 installed a snapshot of shard 4 at 13; the power cut tore its round's write after the
  // snapshot's mark and before the hard state: commit 10 under a snapshot at 13, and n1 could
  // not open its data ("persisted commit 10 outside [13, 13]"). The commit is now raised to
  // the snapshot's index at open (WalRaftStorage.initialState).
  { seeds: [990000], nodes: 5, what: "a torn write kept a snapshot's mark, not its hard state" },
  // n1 installed a snapshot of shard 6 at 19 durably in its engine; a power cut tore its WAL's
  // mark, so it restarted with the engine at 19 and an empty log. The leader re-sent the log
  // from 1, and the replica replayed its conf changes onto the configuration of 19: a removed
  // replica a voter until the replay passed its removal. They are in effect already
  // (RaftConfig.stateApplied; ShardReplica skips them too).
  { seeds: [2200394], nodes: 4, what: "an engine ahead of its log replayed old conf changes" },
  // n1 restarted with shard 4's engine at 10 (the promotion of n5) and its log's commit at 9 (a
  // torn hard state): the core replayed the log's conf changes up to 9 onto the engine's
  // configuration of 10, and the add-learner of n5 demoted it; with the changes up to 10 in
  // effect already, the promotion was not applied again, and n1's core held n5 a learner for
  // good while its driver held it a voter. No replay onto a later configuration now.
  { seeds: [2400019, 2400613], nodes: 5, what: "a replay onto a later configuration" },
  // A leader removed a voter (988640: n3 at index 23) and died before the other voters learnt
  // the removal was committed; only the removed voter had. It applied its removal, so it never
  // campaigned, and refused every vote (its log was longer); the others, still counting it, could
  // not reach a quorum without it: no leader for good. A refusal now carries the refuser's commit
  // index (VoteResponseMessage.commit), and the candidate applies the removal and wins.
  {
    seeds: [988640, 988008],
    nodes: 5,
    what: "only the voter a committed removal took out knew it was committed (moves)",
  },
  // A shard moved before any of its replicas opened its group: a group opens on a request or
  // message for it, and none reached an initial voter, so no leader ever ran the move (seed
  // 7080: the move stayed pending; 7016: the shard had no leader). As in the five-node e2e
  // test. Fail with replaceReplicas' step 0 (MultiRaft.startGroup) taken out.
  { seeds: [7016, 7080], nodes: 4, what: "a shard moved before its group was opened (moves)" },
  // Shard 7, created and never opened (no client key in it), had no leader once its voters
  // failed: nothing opened its group. Fail with step 0 over the moving shards only.
  { seeds: [7477, 7992], nodes: 4, what: "a created shard no request reached (moves)" },
  // The simulation's own model. 7134: shard 0 is an ordinary group here, which startGroup
  // never opens: without its client key it was never opened. 7414: a member killed for good
  // led a sleeping group no client touched; without every node finding it gone (SWIM), its
  // followers slept on believing it led.
  { seeds: [7134], nodes: 4, what: "shard 0 opened by its client key (moves)" },
  { seeds: [7414], nodes: 5, what: "a member stopped for good wakes the groups it led (moves)" },
  // With LeaderMetaCheck taken out (the planted bug stale-meta-leader, below), a group's leader
  // whose node's meta state predated a settled move added the move's old replica back and
  // promoted it, and the old node's replica GC, on a state that said the move settled, deleted
  // it: a voter. With the check, the leader first syncs its meta state.
  {
    seeds: [900, 963],
    nodes: 5,
    what: "a group's leader on a stale meta state would undo a settled move (moves)",
  },
  // A replica the GC deleted, created again empty on a move back, voted for a replica its group
  // had removed while cut off: that one won with 2 of its old 3 and overwrote committed entries.
  // Such a replica now votes, while its log is empty, as the log it lost would.
  { seeds: [1302779], nodes: 5, what: "a replica created again votes with an empty log (moves)" },
  // ... but refusing every vote left a group whose survivors had not learnt that the replica's
  // removal committed, and counted it a voter, without a leader for good: it votes as the log
  // it lost would.
  { seeds: [1600014], nodes: 4, what: "a replica created again refuses every vote (moves)" },
  // A sync of the meta state ended on a node whose WAL had just failed, and its re-pass of the
  // replica steps asked the failed driver to start a group: MultiRaft.startGroup threw.
  { seeds: [1901018], nodes: 5, what: "a failed node asked to start a group (moves)" },
];

describe("driver simulation", () => {
  it(`runs ${SEEDS} seeds without a violation`, async () => {
    const failures: string[] = [];
    const totals = {
      acknowledged: 0,
      reads: 0,
      crashes: 0,
      restarts: 0,
      snapshots: 0,
      faults: 0,
      partitions: 0,
      clusters: 0,
      membership: 0,
      transfers: 0,
      wipes: 0,
      quietStrikes: 0,
      suspicions: 0,
      seenBack: 0,
    };
    for (let seed = 1; seed <= SEEDS; seed++) {
      const r = await runDriverSeed({ seed });
      totals.acknowledged += r.stats.acknowledgedWrites;
      totals.reads += r.stats.completedReads;
      totals.crashes += r.stats.crashes;
      totals.restarts += r.stats.restarts;
      totals.snapshots += r.stats.snapshots;
      totals.faults += r.stats.ioFaults;
      totals.partitions += r.stats.partitions;
      totals.membership += r.stats.membershipApplied;
      totals.transfers += r.stats.transfers;
      totals.wipes += r.stats.wipes;
      totals.quietStrikes += r.stats.quietStrikes;
      totals.suspicions += r.stats.suspicions;
      totals.seenBack += r.stats.seenBack;
      if (r.nodes >= 3) totals.clusters++;
      if (r.violation !== null) {
        failures.push(
          `${r.violation.kind}: ${r.violation.message}\n  replay: ${driverReplayCommand({ seed, nodes: r.nodes })}`,
        );
      }
    }
    assert.deepEqual(failures, []);
    // The runs did real work: hundreds of writes and reads a seed, crashes, faults, snapshots.
    // (Seeds 1–40 acknowledge 3,979 writes and complete 3,036 reads since a rejected vote no
    // longer restarts the election timer, 4,336 and 3,265 before: other fault schedules, drawn
    // as the runs diverge; seeds 41–240, 31,902 and 24,470 against 32,180 and 24,653.)
    assert.ok(totals.acknowledged > SEEDS * 90, `only ${totals.acknowledged} acknowledged writes`);
    // (Client pauses for quiescence and wipes leave fewer reads than writes in some seeds.)
    assert.ok(totals.reads > SEEDS * 70, `only ${totals.reads} completed reads`);
    assert.ok(totals.crashes > SEEDS, `only ${totals.crashes} crashes`);
    assert.ok(totals.restarts > SEEDS / 2, `only ${totals.restarts} restarts`);
    assert.ok(totals.snapshots > SEEDS, `only ${totals.snapshots} snapshots`);
    assert.ok(totals.faults > SEEDS / 2, `only ${totals.faults} injected I/O faults`);
    assert.ok(totals.clusters > SEEDS / 4, `only ${totals.clusters} three-node runs`);
    assert.ok(totals.partitions > SEEDS / 2, `only ${totals.partitions} partitions`);
    assert.ok(totals.membership > SEEDS / 2, `only ${totals.membership} membership changes`);
    assert.ok(totals.transfers > SEEDS / 2, `only ${totals.transfers} leadership transfers`);
    assert.ok(totals.wipes > SEEDS / 10, `only ${totals.wipes} wiped disks`);
    // Nodes leading sleeping groups were struck, and the failure detector told the others.
    assert.ok(totals.quietStrikes > SEEDS / 2, `only ${totals.quietStrikes} strikes on sleepers`);
    assert.ok(totals.suspicions > SEEDS * 2, `only ${totals.suspicions} failure reports`);
    // Nodes held down came back, and the groups that slept past them woke (nodeDown).
    assert.ok(totals.seenBack > SEEDS, `only ${totals.seenBack} nodes seen back`);
  });

  it(`moves replicas on ${MOVE_SEEDS.length} seed(s) of four or five nodes: joins, decommissions, dead members, strikes mid-move`, async () => {
    // Seeds with moves (test/replication/sim/moves.ts): the allocator, the groups' leaders'
    // replica steps and the meta commands of the product, under the chaos; the cluster then
    // settles on three voters per shard on active members, matching the meta record.
    const failures: string[] = [];
    const totals = {
      joins: 0,
      leaves: 0,
      moves: 0,
      settles: 0,
      strikes: 0,
      handoffs: 0,
      checks: 0,
      removed: 0,
      syncs: 0,
    };
    for (const [seed, nodes] of MOVE_SEEDS) {
      const r = await runDriverSeed({ seed, nodes });
      totals.joins += r.stats.joins;
      totals.leaves += r.stats.leaves;
      totals.moves += r.stats.moves;
      totals.settles += r.stats.settles;
      totals.strikes += r.stats.moveStrikes;
      totals.handoffs += r.stats.leaderHandoffs;
      totals.checks += r.stats.confChecks;
      totals.removed += r.stats.replicasRemoved;
      totals.syncs += r.stats.metaSyncs;
      if (r.violation !== null) {
        failures.push(
          `${r.violation.kind}: ${r.violation.message}\n  replay: ${driverReplayCommand({ seed, nodes })}`,
        );
      }
    }
    assert.deepEqual(failures, []);
    assert.ok(totals.joins >= MOVE_SEEDS.length, `only ${totals.joins} joins`);
    assert.ok(totals.handoffs > 0, `only ${totals.handoffs} leaders handed their group over`);
    assert.ok(totals.leaves > 0, `only ${totals.leaves} members left`);
    assert.ok(totals.moves > MOVE_SEEDS.length * 3, `only ${totals.moves} moves`);
    assert.ok(totals.settles > MOVE_SEEDS.length * 3, `only ${totals.settles} moves settled`);
    assert.ok(totals.strikes > 0, `only ${totals.strikes} strikes mid-move`);
    assert.ok(totals.checks > MOVE_SEEDS.length * 10, `only ${totals.checks} conf changes checked`);
    // The replicas moved off a node were deleted by its replica GC, after syncing its meta state.
    assert.ok(totals.removed > 0, `only ${totals.removed} replicas deleted by replica GC`);
    assert.ok(totals.syncs > MOVE_SEEDS.length, `only ${totals.syncs} meta syncs`);
  });

  for (const { seeds, nodes, what } of REGRESSION_SEEDS) {
    it(`runs clean the seed${seeds.length > 1 ? "s" : ""} where ${what}`, async () => {
      for (const seed of seeds) {
        const r = await runDriverSeed({ seed, nodes });
        assert.equal(
          r.violation,
          null,
          `seed ${seed}: ${r.violation?.kind}: ${r.violation?.message}`,
        );
      }
    });
  }

  // The searches below start at the first seed known to catch their bug (found by searching from
  // seed 1, 2026-12-07), to keep the suite short; each still goes on to seed 500 if a change to
  // the simulation or the product moves it. `DRIVER_SIM_CATCH_FROM_1=1` searches from seed 1.
  const from = (first: number): number =>
    process.env["DRIVER_SIM_CATCH_FROM_1"] === "1" ? 1 : first;

  it("catches the restart stale read (issue 9, bug 1) within 500 seeds", async () => {
    // Seeds 31, 52, 54, 55, … catch it.
    let caught: number | null = null;
    for (let seed = from(31); seed <= 500 && caught === null; seed++) {
      const r = await runDriverSeed({ seed, bugs: { staleReadAfterRestart: true } });
      if (r.violation?.kind === "linearizability") caught = seed;
    }
    assert.notEqual(caught, null, "the planted stale read went unnoticed for 500 seeds");
  });

  it("catches a replica that leads its group's founding term again after a restart within 500 seeds", async () => {
    // A new group's first leader takes the founding term without an election, once its founding
    // is durable. Led again after a restart, the term gets a second author: the entries the
    // followers hold, which the leader's disk had not yet, are overwritten in their place.
    // Seed 86 is the first to catch it (2026-12-07; 75, 82, 116, 126, … before the simulation
    // changed).
    let caught: number | null = null;
    for (let seed = from(86); seed <= 500 && caught === null; seed++) {
      const r = await runDriverSeed({ seed, nodes: 3, bugs: { leadFoundingTermAgain: true } });
      if (r.violation !== null) caught = seed;
    }
    assert.notEqual(
      caught,
      null,
      "the planted second founding leader went unnoticed for 500 seeds",
    );
  });

  it("catches the rotation checkpoint that records a batch not yet written (issue 9, bug 2) within 500 seeds", async () => {
    // Seeds 18, 69, 99, 138, … catch it.
    let caught: number | null = null;
    for (let seed = from(18); seed <= 500 && caught === null; seed++) {
      const r = await runDriverSeed({
        seed,
        nodes: 3,
        bugs: { rotationCheckpointIncludesBatch: true },
      });
      if (r.violation?.kind === "restart-failed") caught = seed;
    }
    assert.notEqual(caught, null, "the planted checkpoint bug went unnoticed for 500 seeds");
  });

  it("catches a follower read served before its read index is applied within 500 seeds", async () => {
    let caught: number | null = null;
    for (let seed = 1; seed <= 500 && caught === null; seed++) {
      const r = await runDriverSeed({ seed, nodes: 3, bugs: { followerReadWithoutApply: true } });
      if (r.violation?.kind === "linearizability") caught = seed;
    }
    assert.notEqual(caught, null, "the planted follower read went unnoticed for 500 seeds");
  });

  it("catches answers and votes sent before their round is durable within 500 seeds", async () => {
    // Only a leader's appends and heartbeats may leave before the round's WAL write
    // (RoundLoop#stage): this bug sends everything then. Seeds 22, 42, 68, 75, … catch it.
    let caught: number | null = null;
    for (let seed = from(22); seed <= 500 && caught === null; seed++) {
      const r = await runDriverSeed({
        seed,
        nodes: 3,
        bugs: { everyMessageBeforeWalWrite: true },
      });
      if (r.violation?.kind === "linearizability") caught = seed;
    }
    assert.notEqual(caught, null, "the planted early answers went unnoticed for 500 seeds");
  });

  it("catches a wiped node that comes back as the replica it was within 500 seeds", async () => {
    // An empty disk under the old replica id forgets the votes and acknowledgements it gave:
    // what rejoining as a new replica (src/node/replicas.ts) is for. Seeds 17, 19, 61, 71, …
    let caught: number | null = null;
    for (let seed = from(17); seed <= 500 && caught === null; seed++) {
      const r = await runDriverSeed({ seed, nodes: 3, bugs: { wipeKeepsReplica: true } });
      if (r.violation?.kind === "linearizability") caught = seed;
    }
    assert.notEqual(caught, null, "the planted wipe went unnoticed for 500 seeds");
  });

  it("catches a group's leader acting on a meta state older than a settled move within 500 seeds", async () => {
    // The bug fixed in 6d47d4a (LeaderMetaCheck): the leader moves the shard back onto the old
    // node, whose replica GC then deletes a voter. Few seeds catch it (five nodes; none of four):
    // 963 until the WAL's drop record kept the dropped log's end (its bytes changed that seed's
    // course), and 5351 of 900–5399 since. The search starts there to keep the suite short, and
    // still goes on if a change to the simulation or the product moves it.
    let caught: number | null = null;
    for (let seed = 5351; seed <= 5851 && caught === null; seed++) {
      const r = await runDriverSeed({ seed, nodes: 5, bugs: { staleMetaLeader: true } });
      if (r.violation?.kind === "deleted-voter") caught = seed;
    }
    assert.notEqual(caught, null, "the planted stale meta leader went unnoticed for 500 seeds");
  });

  it("catches a replica created again on a move back voting with an empty log", async () => {
    // ShardReplica.recreated taken out: seed 1302779 (five nodes) lets a replica its group
    // removed while cut off win an election. Searched onwards in case a change moves it.
    let caught: number | null = null;
    for (let seed = 1302779; seed <= 1302979 && caught === null; seed++) {
      const r = await runDriverSeed({ seed, nodes: 5, bugs: { voteWhenRecreated: true } });
      if (r.violation !== null) caught = seed;
    }
    assert.notEqual(caught, null, "the planted vote of a replica created again went unnoticed");
  });

  it("stays clean on the seeds the 10,000-seed runs found failing", async () => {
    // 36, 103, 954, 1102, 1316, 1398 (3 nodes): the leader of sleeping groups was wiped; their
    // followers' reads failed at its node and never woke them. A failed remote read index now
    // wakes the group (and a rejoin wakes the groups the old replica led).
    // 7151, 8371 (3 nodes): a shard directory created while an fsync of its parent failed was
    // never made durable on the retry; a power cut then took the snapshot installed in it, and
    // the replica restarted with an empty configuration (a group of one). ensureDir now fsyncs
    // every ancestor once per process.
    // 302 (3 nodes): with commit-only rounds synced lazily, a snapshot compacted the WAL past
    // the durable commit index, and a power cut left a log whose commit lies below its first
    // index. Compactions now stop at the commit index.
    for (const seed of [36, 103, 302, 954, 1102, 1316, 1398, 7151, 8371]) {
      const r = await runDriverSeed({ seed, nodes: 3 });
      assert.equal(r.violation, null, driverReplayCommand({ seed, nodes: 3 }));
    }
  });

  it("replays a seed exactly", async () => {
    const a = await runDriverSeed({ seed: 42, trace: true });
    const b = await runDriverSeed({ seed: 42, trace: true });
    assert.deepEqual(b.stats, a.stats);
    assert.deepEqual(b.trace, a.trace);
    assert.ok(a.trace.length > 0);
  });
});
