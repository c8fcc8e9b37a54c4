/**
 * The contract between the multi-raft driver and the transport that carries its groups'
 * messages to the other nodes (GrpcTransport in cluster mode, the simulation's network in
 * tests). The other direction is MultiRaft.receive() and MultiRaft.reportUnreachable().
 */
import type { Message, NodeId } from "../raft/index.ts";

/** A Raft message of one shard's group. */
export interface ShardMessage {
  readonly shard: number;
  readonly message: Message;
}

export interface RaftTransport {
  /**
   * Sends one round's messages for node `to`, in order. Delivery is best effort: Raft retries
   * what is lost. Called once the round's records are durable, except for a leader's appends and
   * heartbeats (sent before the WAL write, then flush()). When the messages carry a
   * snapshot, `sent` is given: the transport calls it once (never from inside send()) with
   * whether the snapshots were delivered (true; GrpcTransport says so once the peer acknowledged
   * every one) or lost (false), and the driver reports the outcome to the groups
   * (RawNode.reportSnapshot). Peers found unreachable are reported with
   * MultiRaft.reportUnreachable().
   */
  send(to: NodeId, messages: readonly ShardMessage[], sent?: (delivered: boolean) => void): void;
  /**
   * Hands what send() was given this turn to the network now, not after the turn: the driver
   * calls it once a round's appends are given (before its WAL write), once its acknowledgements
   * are (after the sync), and once the answers its applies settle are framed. A round runs
   * from setImmediate, so "after the turn" is the next turn's check phase. A transport that
   * sends at once has nothing to do here; a wrapper must pass it on
   * (src/node/counting-transport.ts).
   */
  flush(): void;
  /**
   * True: the transport reads a snapshot message's image from its stream (Snapshot.stream) as
   * it sends it, and releases the stream once the transfer ends, whatever its outcome, and when
   * it drops the message; the driver then gives it snapshots streamed from a pinned engine
   * version (snapshot-pins.ts). Otherwise snapshots come whole in memory (`data`). A wrapper
   * must pass it on.
   */
  readonly streamsSnapshots?: boolean;
}
