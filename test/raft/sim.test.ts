/**
 * The Raft simulation in `npm test`: many seeds of 3 and 5 members must run clean, every
 * planted bug must be caught within 500 seeds (one within 1000; the simulation has teeth), runs
 * must replay exactly, and the CLI must print the command that replays a failure.
 *
 * SIM_SEEDS=N raises the number of seeds (default 300: each seed now carries membership changes
 * and a few hundred client operations, about five times the work of a seed of the first version,
 * which ran 1000).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { describe, it } from "node:test";
import { bugsByName, replayCommand } from "./sim/replay.ts";
import { runSeed } from "./sim/simulator.ts";

const SEEDS = Number(process.env.SIM_SEEDS ?? "300");
const root = join(import.meta.dirname, "..", "..");

describe("raft simulation", () => {
  it(`runs ${SEEDS} seeds (3 and 5 members) without a violation`, () => {
    const failures: string[] = [];
    let acknowledged = 0;
    let reads = 0;
    let crashes = 0;
    let confChanges = 0;
    let transfers = 0;
    let unknown = 0;
    let quiescences = 0;
    let sleepingLeaderFaults = 0;
    let leaderDownReports = 0;
    let heldDown = 0;
    let wokenForBack = 0;
    let logLosses = 0;
    for (let seed = 1; seed <= SEEDS; seed++) {
      const r = runSeed({ seed });
      logLosses += r.stats.logLosses;
      quiescences += r.stats.quiescences;
      sleepingLeaderFaults += r.stats.quiescedLeaderFaults;
      leaderDownReports += r.stats.leaderDownReports;
      heldDown += r.stats.membersHeldDown;
      wokenForBack += r.stats.wokenForMemberBack;
      acknowledged += r.stats.acknowledgedWrites;
      reads += r.stats.completedReads;
      crashes += r.stats.crashes;
      confChanges += r.stats.confChanges;
      transfers += r.stats.transfers;
      unknown += r.stats.historyUnknown;
      if (r.violation !== null) {
        failures.push(
          `${r.violation.kind}: ${r.violation.message}\n  replay: ${replayCommand({ seed, nodes: r.nodes })}`,
        );
      }
    }
    assert.deepEqual(failures, []);
    // The runs did real work: writes acknowledged, reads served, members crashed.
    assert.ok(acknowledged > SEEDS * 50, `only ${acknowledged} acknowledged writes`);
    assert.ok(reads > SEEDS * 40, `only ${reads} completed reads`);
    assert.ok(crashes > SEEDS, `only ${crashes} crashes`);
    assert.ok(confChanges > SEEDS, `only ${confChanges} membership changes`);
    assert.ok(transfers > SEEDS / 2, `only ${transfers} leadership transfers`);
    // Groups fell asleep, leaders were struck while they slept, the failure detector spoke.
    assert.ok(quiescences > SEEDS, `only ${quiescences} quiescences`);
    assert.ok(
      sleepingLeaderFaults > SEEDS / 4,
      `only ${sleepingLeaderFaults} sleeping leaders struck`,
    );
    assert.ok(leaderDownReports > SEEDS, `only ${leaderDownReports} leader-down reports`);
    // Leaders slept past members held down, and woke when they came back (RaftConfig.memberDown).
    assert.ok(heldDown > SEEDS, `only ${heldDown} members held down`);
    assert.ok(wokenForBack > 0, "no leader woken for a member back");
    // Members lost their logs and were refilled (half the seeds draw losses).
    assert.ok(logLosses > SEEDS / 2, `only ${logLosses} lost logs`);
    // Every history got a verdict: the checker's budget is not what passes them.
    assert.equal(unknown, 0);
  });

  // Demotions (voter to learner) are off in the seeds above, which replay as they did before
  // demotions existed; here half the voter removals drawn demote the voter instead.
  it("runs 200 seeds with voters demoted to learners (the leader itself too) without a violation", () => {
    const failures: string[] = [];
    let demotions = 0;
    for (let seed = 1; seed <= 200; seed++) {
      const r = runSeed({ seed, demote: true });
      demotions += r.stats.demotions;
      if (r.violation !== null) {
        failures.push(
          `${r.violation.kind}: ${r.violation.message}\n  replay: ${replayCommand({ seed, nodes: r.nodes, demote: true })}`,
        );
      }
    }
    assert.deepEqual(failures, []);
    assert.ok(demotions > 50, `only ${demotions} demotions`);
  });

  // Seeds searched for each bug: 500, but for read-without-quorum, caught by seed 14 alone of
  // the first 500 until lost logs (half the seeds) changed those runs, and now first by seed
  // 504 (then about one seed in 70).
  const budget = (bug: string): number => (bug === "read-without-quorum" ? 1000 : 500);
  for (const [bug, kinds] of [
    [
      "commit-prior-term",
      ["commit-rule", "state-machine-safety", "leader-completeness", "durability"],
    ],
    [
      "forget-vote",
      ["election-safety", "state-machine-safety", "leader-completeness", "log-matching"],
    ],
    [
      "ack-before-persist",
      [
        "invariant",
        // A follower that lost what it acknowledged: its leader probes above its log for good.
        "liveness",
        "durability",
        "leader-completeness",
        "state-machine-safety",
        "election-safety",
        "log-matching",
      ],
    ],
    ["read-without-quorum", ["linearizability"]],
    [
      "count-learners",
      ["leader-completeness", "state-machine-safety", "durability", "linearizability", "invariant"],
    ],
    [
      "follower-commit-without-match",
      ["state-machine-safety", "leader-completeness", "durability", "linearizability", "invariant"],
    ],
    ["sleep-through-messages", ["liveness", "quiescence"]],
    // A member that lost its log votes by the log it has: it elects a leader lacking an entry
    // committed on it and one other member.
    ["votes-with-lost-log", ["leader-completeness", "state-machine-safety", "durability"]],
  ] as const) {
    it(`catches the planted bug ${bug} within ${budget(bug)} seeds`, () => {
      const bugs = bugsByName(bug);
      assert.ok(bugs !== undefined);
      for (let seed = 1; seed <= budget(bug); seed++) {
        const r = runSeed({ seed, bugs });
        if (r.violation !== null) {
          assert.ok(
            (kinds as readonly string[]).includes(r.violation.kind),
            `unexpected kind ${r.violation.kind}: ${r.violation.message}`,
          );
          return;
        }
      }
      assert.fail(`${bug} survived ${budget(bug)} seeds`);
    });
  }

  it("stays clean on the seeds the 10,000-seed runs found failing", () => {
    // 6500 (3 members, PreVote off): a member with a stale configuration raced the would-be
    // leader for terms forever; a refused vote now carries the refuser's term.
    // 7104392 (5 members, PreVote off, two voters left): the member behind kept campaigning and
    // each of its lost campaigns restarted the election timer of the one that could win; a
    // vote request restarts it now only when granted.
    // 7605952 (3 members, PreVote off, two voters left): the member that could win restarted its
    // timer at every refusal by the other's higher term, so the other always campaigned first;
    // a refusal now keeps the timer.
    // 7705622 and 7703336 (3 members, PreVote off): the same two, the phases of their timers
    // left the one behind first for 18 rounds; a member that refuses a candidate whose log is
    // ahead of its own now draws a new timeout.
    // 937841 (5 members): the checker's, not Raft's: n2 won term 5 on votes that reached it after
    // n1, leader of term 6, committed index 53, and the checker wanted n2 to hold it. Leader
    // completeness is owed to entries committed in earlier terms (checker.ts).
    for (const [seed, nodes] of [
      [6500, 3],
      [7104392, 5],
      [7605952, 3],
      [7703336, 3],
      [7705622, 3],
      [937841, 5],
    ] as const) {
      const r = runSeed({ seed, nodes });
      assert.equal(r.violation, null, replayCommand({ seed, nodes }));
    }
  });

  it("replays a seed exactly", () => {
    const a = runSeed({ seed: 42, trace: true });
    const b = runSeed({ seed: 42, trace: true });
    assert.deepEqual(a.stats, b.stats);
    assert.deepEqual(a.trace, b.trace);
    const c = runSeed({ seed: 43, trace: true });
    assert.notDeepEqual(a.trace, c.trace);
  });

  it("the CLI reports a failure with the command that replays it", () => {
    // Find a seed the planted bug fails on, then run the CLI the way a developer would.
    const bugs = bugsByName("forget-vote");
    assert.ok(bugs !== undefined);
    let failing = -1;
    for (let seed = 1; seed <= 500 && failing < 0; seed++) {
      if (runSeed({ seed, bugs }).violation !== null) failing = seed;
    }
    assert.ok(failing > 0);
    let out = "";
    let status = 0;
    try {
      execFileSync(
        process.execPath,
        ["scripts/sim.ts", "--seed", String(failing), "--bug", "forget-vote"],
        {
          cwd: root,
          encoding: "utf8",
        },
      );
    } catch (err) {
      const e = err as { status: number; stdout: string };
      status = e.status;
      out = e.stdout;
    }
    assert.equal(status, 1);
    assert.match(out, new RegExp(`FAIL seed=${failing} nodes=\\d`));
    assert.match(
      out,
      new RegExp(`replay: npm run sim -- --seed ${failing} --nodes \\d --bug forget-vote --trace`),
    );
    assert.match(out, /^sim: 1 seeds, 1 violations$/m);
  });

  it("the CLI ends a clean run with the summary line", () => {
    const out = execFileSync(process.execPath, ["scripts/sim.ts", "--seeds", "5", "--seed", "7"], {
      cwd: root,
      encoding: "utf8",
    });
    assert.match(out, /^sim: 5 seeds, 0 violations$/m);
  });

  it("the CLI rejects bad arguments", () => {
    assert.throws(
      () =>
        execFileSync(process.execPath, ["scripts/sim.ts", "--seeds", "zero"], {
          cwd: root,
          encoding: "utf8",
          stdio: "pipe",
        }),
      (err: { status: number; stderr: string }) =>
        err.status === 2 && /--seeds must be an integer/.test(err.stderr),
    );
  });
});
