/**
 * TermConfirmer: a leader's term checks, batched per peer node with one call in flight. The
 * rule that keeps reads linearizable: a check never takes the answer of a call sent before it
 * was asked. Calls here are scripted: each is held until the test answers it.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type TermCheck, TermConfirmer } from "../../src/replication/term-confirm.ts";

interface Call {
  readonly node: string;
  readonly checks: readonly TermCheck[];
  answer(answers: boolean[]): void;
  fail(): void;
}

function scripted(options: { confirmByEarlierCall?: boolean } = {}): {
  confirmer: TermConfirmer;
  calls: Call[];
} {
  const calls: Call[] = [];
  const confirmer = new TermConfirmer(
    (node, checks) =>
      new Promise((resolve, reject) =>
        calls.push({
          node,
          checks: [...checks],
          answer: resolve,
          fail: () => reject(new Error("lost")),
        }),
      ),
    options,
  );
  return { confirmer, calls };
}

const check = (shard: number, term = 5, replica = "n2"): TermCheck => ({ shard, term, replica });
/** Lets the answers' promise callbacks run. */
const settle = (): Promise<void> => new Promise((r) => setImmediate(r));

describe("TermConfirmer", () => {
  it("sends a check at once, and the checks asked meanwhile in the next call, one entry each", async () => {
    const { confirmer, calls } = scripted();
    const got: [string, boolean][] = [];
    const ask = (label: string, c: TermCheck): void =>
      confirmer.ask("n2", c, (ok) => got.push([label, ok]));
    ask("a", check(1));
    assert.equal(calls.length, 1);
    assert.deepEqual(calls[0]?.checks, [check(1)]);

    // Asked while the first call is out: they wait for the second call, whatever it answers.
    ask("b", check(1));
    ask("c", check(2));
    ask("d", check(1));
    assert.equal(calls.length, 1, "one call in flight per node");
    calls[0]?.answer([true]);
    await settle();
    assert.deepEqual(got, [["a", true]], "the later checks of shard 1 took no earlier answer");
    assert.equal(calls.length, 2);
    assert.deepEqual(calls[1]?.checks, [check(1), check(2)], "one entry per distinct check");
    calls[1]?.answer([false, true]);
    await settle();
    assert.deepEqual(got, [
      ["a", true],
      ["b", false],
      ["c", true],
      ["d", false],
    ]);
  });

  it("keeps one batch per node", async () => {
    const { confirmer, calls } = scripted();
    const got: string[] = [];
    confirmer.ask("n2", check(1), (ok) => got.push(`n2 ${ok}`));
    confirmer.ask("n3", check(1, 5, "n3"), (ok) => got.push(`n3 ${ok}`));
    assert.deepEqual(
      calls.map((c) => c.node),
      ["n2", "n3"],
    );
    calls[1]?.answer([true]);
    calls[0]?.answer([false]);
    await settle();
    assert.deepEqual(got, ["n3 true", "n2 false"]);
  });

  it("answers no for a call that fails or answers the wrong number of checks, then goes on", async () => {
    const { confirmer, calls } = scripted();
    const got: boolean[] = [];
    confirmer.ask("n2", check(1), (ok) => got.push(ok));
    confirmer.ask("n2", check(2), (ok) => got.push(ok));
    calls[0]?.fail();
    await settle();
    assert.deepEqual(got, [false]);
    assert.equal(calls.length, 2, "the checks asked meanwhile still leave");
    calls[1]?.answer([true, true]);
    await settle();
    assert.deepEqual(got, [false, false], "two answers to one check are no answer");
    confirmer.ask("n2", check(3), (ok) => got.push(ok));
    calls[2]?.answer([true]);
    await settle();
    assert.deepEqual(got, [false, false, true]);
  });

  it("the planted bug answers a later check with an earlier call (what the rule forbids)", async () => {
    // Shows the first test can tell: with the bug, "b" is answered by the first call.
    const { confirmer, calls } = scripted({ confirmByEarlierCall: true });
    const got: [string, boolean][] = [];
    confirmer.ask("n2", check(1), (ok) => got.push(["a", ok]));
    confirmer.ask("n2", check(1), (ok) => got.push(["b", ok]));
    calls[0]?.answer([true]);
    await settle();
    assert.deepEqual(got, [
      ["a", true],
      ["b", true],
    ]);
    assert.equal(calls.length, 1);
  });
});
