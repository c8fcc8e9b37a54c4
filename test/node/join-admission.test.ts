/**
 * The bounds on nodes let into a cluster (src/node/join-admission.ts): at most
 * `cluster.max_joining` members joining at once, admissions in flight counted, and at most a
 * fixed number of members recorded, removed ones aside. A node already a member asking again is
 * never refused, and nothing but an admission is checked.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type MetaCommand, type MetaMember, MetaState } from "../../src/cluster/index.ts";
import { CairnError } from "../../src/common/errors.ts";
import { JoinAdmission, MEMBER_LIMIT } from "../../src/node/join-admission.ts";

function member(id: string, incarnation = `inc-${id}`): MetaMember {
  return { id, rpcAddr: `${id}.example:7447`, httpAddr: `${id}.example:8080`, incarnation };
}

function apply(state: MetaState, cmd: MetaCommand): MetaState {
  const r = state.apply(cmd);
  assert.notEqual(r.outcome.kind, "rejected", JSON.stringify(r.outcome));
  return r.state;
}

const founded = MetaState.empty().apply({
  op: "bootstrap",
  clusterId: "c-1",
  totalShards: 16,
  replicationFactor: 3,
  members: [member("n1"), member("n2"), member("n3")],
}).state;

const join = (id: string, incarnation = `inc-${id}`): MetaCommand => ({
  op: "join",
  member: member(id, incarnation),
});

/** `founded` with nodes `ids` admitted (joining). */
function withJoining(...ids: string[]): MetaState {
  return ids.reduce((s, id) => apply(s, join(id)), founded);
}

function refusal(f: () => unknown): CairnError {
  try {
    f();
  } catch (err) {
    assert.ok(err instanceof CairnError, String(err));
    assert.equal(err.code, MEMBER_LIMIT);
    assert.equal(err.retryable, true);
    return err;
  }
  assert.fail("admitted");
}

describe("JoinAdmission", () => {
  it("lets in at most max_joining nodes joining at once, and the next once one is active", () => {
    const admission = new JoinAdmission(2);
    const state = withJoining("n4", "n5");
    const err = refusal(() => admission.admit(state, join("n6")));
    assert.match(err.message, /2 node\(s\) are joining the cluster already, at most 2 at once/);
    assert.match(err.message, /cluster\.max_joining/);
    const active = apply(state, { op: "set-state", id: "n4", state: "active" });
    admission.admit(active, join("n6"))();
    // A joining member that died frees its place too.
    const dead = apply(state, { op: "set-state", id: "n5", state: "dead" });
    admission.admit(dead, join("n6"))();
  });

  it("counts the admissions being proposed: a flood checked before any applies does not all fit", () => {
    const admission = new JoinAdmission(3);
    const releases = ["x1", "x2", "x3"].map((id) => admission.admit(founded, join(id)));
    assert.equal(admission.pending, 3);
    refusal(() => admission.admit(founded, join("x4")));
    // The same node offering again while its first offer is in flight is not a second admission.
    admission.admit(founded, join("x2"))();
    assert.equal(admission.pending, 3);
    releases[0]?.();
    releases[0]?.(); // a second release changes nothing
    assert.equal(admission.pending, 2);
    admission.admit(founded, join("x4"));
    refusal(() => admission.admit(founded, join("x5")));
  });

  it("never refuses a member asking again, nor any command but an admission", () => {
    const admission = new JoinAdmission(1);
    const state = withJoining("n4");
    // n4 joining already: its own offer again (it asks until it hears the answer).
    admission.admit(state, join("n4"))();
    admission.admit(state, { op: "rejoin", id: "n1", incarnation: "inc-n1" })();
    admission.admit(state, { op: "rejoin", id: "n2", incarnation: "a-wiped-disk" })();
    admission.admit(state, { op: "set-state", id: "n1", state: "decommissioning" })();
    // No cluster yet: nothing to count against.
    admission.admit(MetaState.empty(), join("n9"))();
    assert.equal(admission.pending, 0);
  });

  it("counts a removed member's new life as a node joining", () => {
    const admission = new JoinAdmission(1);
    let state = withJoining("n4", "n5");
    state = apply(state, { op: "set-state", id: "n4", state: "dead" });
    state = apply(state, { op: "set-state", id: "n4", state: "removed" });
    // n5 is joining: n4 coming back on a new disk is a second node joining.
    refusal(() => admission.admit(state, join("n4", "a-new-disk")));
    refusal(() => admission.admit(state, { op: "rejoin", id: "n4", incarnation: "a-new-disk" }));
    const active = apply(state, { op: "set-state", id: "n5", state: "active" });
    admission.admit(active, join("n4", "a-new-disk"))();
  });

  it("records at most max_members members, removed ones aside", () => {
    const admission = new JoinAdmission(8, 5);
    let state = withJoining("n4", "n5");
    const err = refusal(() => admission.admit(state, join("n6")));
    assert.match(
      err.message,
      /the cluster has 5 members, at most 5: remove dead or decommissioned/,
    );
    state = apply(state, { op: "set-state", id: "n5", state: "dead" });
    refusal(() => admission.admit(state, join("n6")));
    state = apply(state, { op: "set-state", id: "n5", state: "removed" });
    admission.admit(state, join("n6"))();
    // Admissions in flight count against it too.
    admission.admit(state, join("n6"));
    refusal(() => admission.admit(state, join("n7")));
  });

  it("counts a removed member's new life against max_members: it is a member again", () => {
    const admission = new JoinAdmission(8, 5);
    let state = withJoining("n4", "n5");
    state = apply(state, { op: "set-state", id: "n5", state: "dead" });
    state = apply(state, { op: "set-state", id: "n5", state: "removed" });
    // n5's place taken by n6: five members again.
    state = apply(state, join("n6"));
    // n5 coming back on a new disk would make six.
    const err = refusal(() => admission.admit(state, join("n5", "a-new-disk")));
    assert.match(err.message, /the cluster has 5 members, at most 5/);
    refusal(() => admission.admit(state, { op: "rejoin", id: "n5", incarnation: "a-new-disk" }));
    // In flight, it counts too: with four members, n5's new life and a new id do not both fit.
    const four = apply(state, { op: "set-state", id: "n6", state: "dead" });
    const fewer = apply(four, { op: "set-state", id: "n6", state: "removed" });
    admission.admit(fewer, join("n5", "a-new-disk"));
    refusal(() => admission.admit(fewer, join("n7")));
  });
});
