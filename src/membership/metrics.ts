/**
 * What membership reports to the metrics registry (wired to prom-client by the server, issue 4):
 *
 * | metric                       | type      | fed by                                     |
 * | ---------------------------- | --------- | ------------------------------------------ |
 * | `swim_cluster_size`          | gauge     | onClusterSize: live members, self included |
 * | `swim_failed_members_total`  | counter   | onMemberFailed: a member marked dead here  |
 * | `swim_gossip_latency_ms`     | histogram | observeGossipLatencyMs: ping → ack round trip |
 * | `cairn_swim_dropped_datagrams_total{reason}` | counter | onDatagramDropped |
 *
 * A member is marked dead here when this node declares it failed or learns it by gossip.
 * "Live" counts alive and suspect members: a suspect member is still a member until declared dead.
 */
import type { DecodeFailureReason } from "./core/index.ts";
import type { SealFailureReason } from "./seal.ts";

/**
 * Upper bounds (ms) of the `swim_gossip_latency_ms` buckets: exponential, factor 2, from 1 ms to
 * 1024 ms (the power of two nearest 1 s), then +Inf. Exactly: 1, 2, 4, 8, 16, 32, 64, 128, 256,
 * 512, 1024.
 */
export const GOSSIP_LATENCY_BUCKETS_MS: readonly number[] = [
  1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024,
];

/** Why a datagram was dropped: the seal's verdict (seal.ts), then the decoder's (core/codec.ts). */
export type DropReason = SealFailureReason | DecodeFailureReason;

export interface MembershipMetrics {
  onClusterSize(liveMembers: number): void;
  onMemberFailed(): void;
  observeGossipLatencyMs(ms: number): void;
  onDatagramDropped(reason: DropReason): void;
}

export const noopMembershipMetrics: MembershipMetrics = {
  onClusterSize: () => {},
  onMemberFailed: () => {},
  observeGossipLatencyMs: () => {},
  onDatagramDropped: () => {},
};
