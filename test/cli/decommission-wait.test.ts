/**
 * `cairn node decommission --wait` (followDecommission, src/cli/ops-commands.ts): it prints each
 * change of the replicas left, and says once what a move needs when none leaves for a while.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  followDecommission,
  NODE_HELP,
  paceOf,
  roughly,
  type Standing,
  standingLine,
  unreachableLine,
} from "../../src/cli/ops-commands.ts";
import { ServerError, UnavailableError } from "../../src/client/index.ts";

/**
 * Runs followDecommission over `answers` (one a poll: a standing, or an error the poll throws)
 * on a clock that each sleep moves on.
 */
async function follow(answers: readonly ([state: string, replicas: number] | Error)[]) {
  let clock = 0;
  let next = 0;
  const printed: string[] = [];
  const stalls: string[] = [];
  const unreachable: string[] = [];
  const at = (a: [string, number] | Error | undefined): Standing => {
    assert.ok(a !== undefined, "polled past the last answer");
    if (a instanceof Error) throw a;
    return { nodeId: "n2", state: a[0], replicas: a[1] };
  };
  const last = await followDecommission(at(["decommissioning", 12]), {
    poll: async () => at(answers[next++]),
    print: (s, pace) =>
      printed.push(
        `${clock / 1000}s ${s.state} ${s.replicas}` +
          (pace === undefined ? "" : ` ${pace.perMinute}/min eta ${pace.etaMs / 1000}s`),
      ),
    stalled: (s, ms) => stalls.push(`${clock / 1000}s ${s.replicas} left, ${ms / 1000}s`),
    unreachable: (err) => unreachable.push(`${clock / 1000}s ${err.message}`),
    everyMs: 1_000,
    stallMs: 5_000,
    unreachableMs: 10_000,
    sleep: (ms) => {
      clock += ms;
      return Promise.resolve();
    },
    now: () => clock,
  });
  return { last, printed, stalls, unreachable, polls: next };
}

describe("cairn node decommission --wait", () => {
  it("cairn node's help says which node it asks: the first of --endpoints that answers", () => {
    // It said "through the node at the first of --endpoints", while a first endpoint that is
    // down, decommissioned or removed makes it ask the next (an audit, 2026-12-07).
    const text = NODE_HELP.replace(/\s+/g, " ");
    assert.doesNotMatch(text, /through the node at the first of --endpoints/);
    assert.match(
      text,
      /through the first of --endpoints that answers \(the next when one is down, or has left the cluster\)/,
    );
  });

  it('says replicas "left" of a member leaving only, not of one recommissioned meanwhile', () => {
    // --wait ended on "n6: active, 663 replica(s) left" once n6 was recommissioned: nothing is
    // left to move off an active member (an audit, 2026-12-07).
    const at = (state: string, replicas: number): Standing => ({ nodeId: "n6", state, replicas });
    assert.equal(standingLine("decommission", at("active", 663)), "n6: active, 663 replica(s)\n");
    assert.equal(
      standingLine("decommission", at("decommissioning", 663)),
      "n6: decommissioning, 663 replica(s) left\n",
    );
    assert.equal(standingLine("remove", at("removed", 0)), "n6: removed, 0 replica(s) left\n");
    assert.equal(
      standingLine("status", at("decommissioning", 5)),
      "n6: decommissioning, 5 replica(s)\n",
    );
  });

  it("says of a node it asks that stopped answering that the decommission goes on, and for how long it asks", () => {
    // It said "the decommission goes on there, still waiting": where, and until when? (an
    // audit, 2026-12-07; it gives up after 2 minutes, exit code 3).
    assert.equal(
      unreachableLine("127.0.0.1:7447", new Error("connect ECONNREFUSED"), 120_000),
      "cairn node: 127.0.0.1:7447 does not answer (connect ECONNREFUSED); the decommission goes on in the cluster without it: asking again for 120 s at most (Ctrl-C stops waiting, not the decommission)\n",
    );
  });

  it("prints each change until the member is decommissioned", async () => {
    const r = await follow([
      ["decommissioning", 12],
      ["decommissioning", 7],
      ["decommissioning", 7],
      ["decommissioning", 0],
      ["decommissioned", 0],
    ]);
    assert.deepEqual(r.printed, [
      "2s decommissioning 7",
      "4s decommissioning 0",
      "5s decommissioned 0",
    ]);
    assert.deepEqual(r.stalls, []);
    assert.equal(r.last.state, "decommissioned");
    assert.equal(r.polls, 5);
  });

  it("gives the pace since it began, and when the last replica should leave at it, from 10 s on", async () => {
    // A decommission of hundreds of replicas printed only the count, for many minutes: when
    // would it end? (a new operator's walk-through, 2026-12-07).
    const going = (n: number, from: number): [string, number][] =>
      Array.from({ length: n }, (_, i) => ["decommissioning", from - i] as [string, number]);
    const r = await follow([...going(11, 11), ["decommissioned", 0]]);
    // 1 replica a second gone from 12: no pace before 10 s, then 60 a minute, the rest at it.
    assert.deepEqual(r.printed.slice(0, 3), [
      "1s decommissioning 11",
      "2s decommissioning 10",
      "3s decommissioning 9",
    ]);
    assert.equal(r.printed[8], "9s decommissioning 3");
    assert.equal(r.printed[9], "10s decommissioning 2 60/min eta 2s");
    assert.equal(r.printed[10], "11s decommissioning 1 60/min eta 1s");
    assert.equal(r.printed[11], "12s decommissioned 0", "no pace once it ended");
    assert.equal(
      standingLine(
        "decommission",
        { nodeId: "n2", state: "decommissioning", replicas: 340 },
        {
          perMinute: 24,
          etaMs: 850_000,
        },
      ),
      "n2: decommissioning, 340 replica(s) left (24.0 a minute: about 14 min to go at this pace)\n",
    );
    // None gone (a recommission put one back before a new decommission): no pace.
    const first = { nodeId: "n2", state: "decommissioning", replicas: 5 };
    assert.equal(paceOf(first, { ...first, replicas: 6 }, 60_000), null);
    assert.deepEqual(paceOf(first, { ...first, replicas: 4 }, 60_000), {
      perMinute: 1,
      etaMs: 240_000,
    });
    assert.equal(roughly(400), "about 1 s");
    assert.equal(roughly(89_000), "about 89 s");
    assert.equal(roughly(90_000), "about 2 min");
    assert.equal(roughly(7_500_000), "about 2 h 5 min");
  });

  it("says once what a move needs when no replica leaves, and again after a later stall", async () => {
    const stuck = (n: number, replicas: number): [string, number][] =>
      Array.from({ length: n }, () => ["decommissioning", replicas] as [string, number]);
    const r = await follow([
      ...stuck(8, 12), // 8 s without a replica leaving: one notice, at 5 s
      ["decommissioning", 11],
      ...stuck(6, 11), // another 6 s: a second notice, 5 s after the last change
      ["decommissioned", 0],
    ]);
    assert.deepEqual(r.stalls, ["5s 12 left, 5s", "14s 11 left, 5s"]);
    assert.deepEqual(r.printed, ["9s decommissioning 11", "16s decommissioned 0"]);
  });

  it("waits on through a node it asks that does not answer for a while (a restart)", async () => {
    // The node the wait asks restarted during a long decommission: the wait ended there, exit
    // 3, while the decommission went on (an audit, 2026-12-07).
    const down = new UnavailableError("connect ECONNREFUSED 127.0.0.1:7448");
    const r = await follow([
      ["decommissioning", 12],
      down,
      down,
      down,
      ["decommissioning", 4],
      ["decommissioned", 0],
    ]);
    assert.equal(r.last.state, "decommissioned");
    assert.deepEqual(r.unreachable, ["2s connect ECONNREFUSED 127.0.0.1:7448"], "said once");
    assert.deepEqual(r.printed, ["5s decommissioning 4", "6s decommissioned 0"]);
    // Past unreachableMs without an answer, it gives up with the poll's error.
    await assert.rejects(
      follow([["decommissioning", 12], ...Array.from({ length: 12 }, () => down)]),
      (err) => err === down,
    );
    // An error that waiting does not cure ends it at once.
    const refused = new ServerError("CAIRN_ERR_PERMISSION_DENIED", "permission denied", 7);
    await assert.rejects(follow([["decommissioning", 12], refused]), (err) => err === refused);
  });

  it("ends when the member stops decommissioning otherwise: recommissioned, or dead", async () => {
    // Recommissioned with replicas still on it: the wait ends there (it used to poll with
    // DecommissionNode, which decommissioned the member again).
    const back = await follow([
      ["decommissioning", 9],
      ["active", 9],
    ]);
    assert.deepEqual(back.printed, ["1s decommissioning 9", "2s active 9"]);
    assert.equal(back.last.state, "active");
    assert.equal(back.polls, 2);
    // Dead while decommissioning (a meta leader of an earlier build marked an unreachable
    // decommissioning member dead): it never becomes decommissioned; the wait ends at once.
    const dead = await follow([["dead", 12]]);
    assert.deepEqual(dead.printed, ["1s dead 12"]);
    assert.equal(dead.last.state, "dead");
    assert.equal(dead.polls, 1);
  });
});
