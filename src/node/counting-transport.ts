/**
 * The peer transport as the node's Raft driver sees it: every frame handed over is counted per
 * peer node (cairn_raft_frames_sent_total, cairn_raft_messages_sent_total,
 * cairn_raft_heartbeats_sent_total), and everything else goes straight through. A wrapper must
 * pass on every member of RaftTransport: `flush` dropped here once made every leader's appends
 * wait behind its own blocking WAL write (they left only after the turn), so that a follower's
 * disk write no longer overlapped the leader's.
 */
import { nodeOfReplica } from "../cluster/index.ts";
import type { CairnMetrics } from "../ops/index.ts";
import type { RaftTransport } from "../replication/index.ts";

export function countingTransport(
  transport: RaftTransport,
  metrics: Pick<CairnMetrics, "raftFrameSent">,
): RaftTransport {
  return {
    send(to, messages, sent) {
      let heartbeats = 0;
      for (const m of messages) if (m.message.type === "heartbeat") heartbeats++;
      metrics.raftFrameSent(nodeOfReplica(to), messages.length, heartbeats);
      transport.send(to, messages, sent);
    },
    flush() {
      transport.flush();
    },
    ...(transport.streamsSnapshots === undefined
      ? {}
      : { streamsSnapshots: transport.streamsSnapshots }),
  };
}
