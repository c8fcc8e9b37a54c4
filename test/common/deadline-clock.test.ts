/**
 * callDeadline: a served call's deadline on the deadline clock, whichever server served it. The
 * front end's calls give one already; grpc-js's Server gives a number on the wall clock, which
 * was read as one on the deadline clock (a deadline decades away).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  callDeadline,
  DEADLINE_ON_CLOCK,
  deadlineClock,
  grpcJsDeadline,
} from "../../src/common/index.ts";

describe("callDeadline", () => {
  it("moves a grpc-js call's wall-clock deadline onto the deadline clock, as a number or a Date", () => {
    for (const d of [grpcJsDeadline(5_000), new Date(grpcJsDeadline(5_000))]) {
      const left = callDeadline({ getDeadline: () => d }) - deadlineClock();
      assert.ok(left > 4_000 && left <= 5_000, `${left} ms left`);
    }
    assert.equal(callDeadline({ getDeadline: () => Infinity }), Infinity);
  });

  it("takes a front end's call's deadline as it is: on the deadline clock already", () => {
    const at = deadlineClock() + 1_234;
    assert.equal(callDeadline({ getDeadline: () => at, [DEADLINE_ON_CLOCK]: true }), at);
    assert.equal(
      callDeadline({ getDeadline: () => Infinity, [DEADLINE_ON_CLOCK]: true }),
      Infinity,
    );
  });
});
