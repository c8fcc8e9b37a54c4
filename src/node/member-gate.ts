/**
 * A node that is not (yet) an active member of its cluster answers client requests with a
 * clear UNAVAILABLE naming why (design.md §5.2): a joining node before it has caught up on the
 * cluster's metadata, a decommissioned or removed one. Nothing reaches the store, so the
 * refusal proves the request was not applied and a client may retry it on another node.
 */
import type { AdminStore, KvStore } from "../api/index.ts";
import { NotMemberError } from "../common/errors.ts";

/**
 * `store` with its KV operations refused while `reason()` names why this node serves none;
 * `leftForGood()`: it never will again (decommissioned or removed), and its refusals say so.
 */
export function gateByMembership<S extends KvStore & AdminStore>(
  store: S,
  reason: () => string | null,
  leftForGood: () => boolean,
): KvStore & AdminStore {
  const refused = (): Promise<never> | null => {
    const why = reason();
    return why === null ? null : Promise.reject(new NotMemberError(why, leftForGood()));
  };
  return {
    put: (key, value, expected, deadline) => refused() ?? store.put(key, value, expected, deadline),
    delete: (key, expected, deadline) => refused() ?? store.delete(key, expected, deadline),
    get: (key, linearizable, deadline, call) =>
      refused() ?? store.get(key, linearizable, deadline, call),
    scan: (req, deadline, call) => refused() ?? store.scan(req, deadline, call),
    ...(store.leaderElsewhere === undefined
      ? {}
      : {
          leaderElsewhere: (key: Uint8Array) =>
            reason() === null ? (store.leaderElsewhere?.(key) ?? null) : null,
        }),
    snapshotShard: (id) => store.snapshotShard(id),
    checkShardId: (id) => store.checkShardId(id),
    shardInfo: (id) => store.shardInfo(id),
    transferLeader: (id, to) => store.transferLeader(id, to),
  };
}
