/**
 * How a shard's waiting requests fail when they cannot succeed: past the driver's request
 * deadline, superseded in the log by a new leader's entries, or overtaken by a snapshot that
 * replaced the log under them (shard.ts).
 */
import { CairnError } from "../common/errors.ts";

/**
 * A request waited longer than the driver's request deadline: for a write the outcome is
 * unknown (its entry may still commit and apply later, as for any lost connection); a read was
 * not served and changed nothing.
 */
export class RequestTimeoutError extends CairnError {
  constructor(what: "write" | "read" | "membership change", waitedMs: number) {
    super(
      "CAIRN_ERR_TIMEOUT",
      what === "read"
        ? `the read was not confirmed within ${waitedMs} ms (no quorum reachable?); retry`
        : `the ${what} was not applied within ${waitedMs} ms (no quorum reachable?); its outcome is unknown: it may still be applied`,
      { retryable: what === "read" },
    );
    this.name = "RequestTimeoutError";
  }
}

/**
 * A write whose call's deadline passed before it was proposed (it waited for its round, or for
 * an election or a leadership transfer to end): its client has given up, and it is never
 * proposed, so never applied: a retry is safe.
 */
export class NotProposedError extends CairnError {
  constructor(waitedMs: number) {
    super(
      "CAIRN_ERR_TIMEOUT",
      `the write was not proposed before its call's deadline (it waited ${Math.round(waitedMs)} ms); it was not applied: retry`,
      { retryable: true },
    );
    this.name = "NotProposedError";
  }
}

/**
 * A linearizable read still waiting (for its read index, an election, or the apply up to its
 * index) when its call's deadline passed: its client has given up, so nothing waits for it any
 * more, and it holds no share of the node's request budget. It changed nothing: a retry is safe.
 */
export class ReadPastDeadlineError extends CairnError {
  /** `waitedMs`: NaN when not known (a read only waiting for the apply here). */
  constructor(waitedMs: number) {
    const waited = Number.isNaN(waitedMs) ? "" : ` (it waited ${Math.round(waitedMs)} ms)`;
    super(
      "CAIRN_ERR_TIMEOUT",
      `the read was not served before its call's deadline${waited}; retry`,
      { retryable: true },
    );
    this.name = "ReadPastDeadlineError";
  }
}

/**
 * A client's call as the read waiting on its behalf sees it (KvStore): `cancelled` once its
 * client has gone (it cancelled the call, or its connection closed), when it emits "cancelled".
 * grpc-js's ServerUnaryCall and the front end's HandedCall are both one: a read takes its call
 * as it is, nothing made for it.
 */
export interface ClientCall {
  readonly cancelled: boolean;
  once(event: "cancelled", listener: () => void): unknown;
  removeListener(event: "cancelled", listener: () => void): unknown;
}

/**
 * A linearizable read still waiting (for its read index, an election, or the apply up to its
 * index) when its client cancelled its call, or its connection closed: nothing waits for it
 * any more, and it holds no share of the node's request budget. Nobody reads the error (the
 * call is gone); a timeout's code, so that nothing takes it for a server fault.
 */
export class ReadCancelledError extends CairnError {
  constructor() {
    super("CAIRN_ERR_TIMEOUT", "the read's call was cancelled before it was served; retry", {
      retryable: true,
    });
    this.name = "ReadCancelledError";
  }
}

/** The proposal cannot succeed any more: another entry took its place in the log. */
export class ProposalLostError extends CairnError {
  constructor(index: number) {
    super(
      "CAIRN_ERR_PROPOSAL_LOST",
      `the write at log index ${index} was superseded by a new leader; it was not applied`,
      {
        retryable: true,
      },
    );
    this.name = "ProposalLostError";
  }
}

/**
 * A snapshot from the leader replaced this replica's log under the proposal's entry before it
 * applied here: whether the entry committed is not known here (the snapshot may hold it, or
 * another leader's entry took its index). For a client this is a deadline come early: the same
 * code, the outcome unknown.
 */
export class ProposalOvertakenError extends CairnError {
  constructor(what: "write" | "membership change", index: number, snapshotIndex: number) {
    super(
      "CAIRN_ERR_TIMEOUT",
      `the ${what} at log index ${index} was overtaken by a snapshot of the log through index ${snapshotIndex} before it applied here; its outcome is unknown: it may have been applied`,
      { retryable: false },
    );
    this.name = "ProposalOvertakenError";
  }
}

/**
 * The write was in this replica's log when the replica stopped serving (its node shutting down,
 * its replica removed, its driver failed): another replica may hold the entry and commit it
 * under the next leader, so it is not known to have failed (a retry could apply it twice).
 */
export class ProposalAbandonedError extends CairnError {
  constructor(index: number, cause: unknown) {
    const why = cause instanceof Error ? cause.message : String(cause);
    super(
      "CAIRN_ERR_TIMEOUT",
      `the write at log index ${index} was in the log when this replica stopped (${why}); its outcome is unknown: it may still be applied`,
      { retryable: false },
    );
    this.name = "ProposalAbandonedError";
  }
}
