import { CairnError } from "../common/errors.ts";
import type { NodeId } from "./types.ts";

/** The operation needs the leader and this member is not it. Retry at `leader` (null: unknown). */
export class NotLeaderError extends CairnError {
  readonly leader: NodeId | null;

  constructor(leader: NodeId | null) {
    // A routine refusal (every forwarded request starts with one), never logged with its
    // stack: capturing one cost ~2% of a forwarding node's CPU (BENCHMARKS.md, "Where the
    // time goes").
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(
      "CAIRN_ERR_NOT_LEADER",
      `not the leader${leader === null ? " (leader unknown)" : ` (leader is ${leader})`}`,
      {
        retryable: true,
      },
    );
    Error.stackTraceLimit = limit;
    this.name = "NotLeaderError";
    this.leader = leader;
  }
}

/** The leader refused a proposal for now (a transfer or a configuration change is under way). */
export class ProposalDroppedError extends CairnError {
  constructor(reason: string) {
    super("CAIRN_ERR_PROPOSAL_DROPPED", `proposal dropped: ${reason}`, { retryable: true });
    this.name = "ProposalDroppedError";
  }
}

/** A request that can never succeed as asked (bad configuration change, bad transfer target). */
export class InvalidRaftRequestError extends CairnError {
  constructor(message: string) {
    super("CAIRN_ERR_INVALID_RAFT_REQUEST", message);
    this.name = "InvalidRaftRequestError";
  }
}

/** An internal invariant broke: the replica must stop rather than risk diverging. */
export class RaftInvariantError extends CairnError {
  constructor(message: string) {
    super("CAIRN_ERR_RAFT_INVARIANT", message);
    this.name = "RaftInvariantError";
  }
}
