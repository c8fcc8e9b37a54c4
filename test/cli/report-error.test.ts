/**
 * reportError (src/cli/common.ts): what a client command says, and its exit code, for an error.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { EXIT, reportError } from "../../src/cli/common.ts";
import { status } from "@grpc/grpc-js";
import { IndeterminateWriteError, ServerError } from "../../src/client/index.ts";
import { runInProcess } from "../support/cli-run.ts";

/** reportError's exit code and what it wrote on standard error. */
function report(command: string, err: unknown): { code: number; err: string } {
  return runInProcess((_args, io) => reportError(io, command, err), []);
}

describe("reportError: an outcome unknown", () => {
  it("tells a key command to read the key", () => {
    const r = report("put", new IndeterminateWriteError("call timed out"));
    assert.equal(r.code, EXIT.indeterminate);
    assert.match(r.err, /read the key to find out/);
  });

  it("tells an admin command how to find out, not to read a key it never named", () => {
    const cases: [string, RegExp][] = [
      ["transfer-leader", /cairn cluster/],
      ["node", /cairn node status/],
      ["snapshot", /again/],
    ];
    for (const [command, advice] of cases) {
      const r = report(command, new IndeterminateWriteError("call timed out"));
      assert.equal(r.code, EXIT.indeterminate, command);
      assert.doesNotMatch(r.err, /read the key/, command);
      assert.match(r.err, advice, command);
    }
  });
});

describe("reportError: a request refused", () => {
  it("a Raft request that can never succeed as asked is a usage error (2), not a server fault (5)", () => {
    const err = new ServerError(
      "CAIRN_ERR_INVALID_RAFT_REQUEST",
      "raft: cannot transfer leadership to a learner",
      status.FAILED_PRECONDITION,
    );
    const r = report("transfer-leader", err);
    assert.equal(r.code, EXIT.usage);
    assert.match(r.err, /refused: raft: cannot transfer leadership to a learner/);
  });
});
