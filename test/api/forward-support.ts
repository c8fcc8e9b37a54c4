/**
 * What the forwarding tests share: the leader's store, follower stores that refuse KV calls
 * naming a leader, and promise wrappers around grpc-js's unary calls.
 */
import assert from "node:assert/strict";
import type {
  CallOptions,
  ClientUnaryCall,
  Metadata,
  ServiceError,
  StatusObject,
} from "@grpc/grpc-js";
import { Metadata as GrpcMetadata } from "@grpc/grpc-js";
import {
  type AdminStore,
  type KvStore,
  loadCairnProto,
  SERVED_BY_KEY,
} from "../../src/api/index.ts";
import { nodeId, NotLeaderError } from "../../src/raft/index.ts";
import { MultiRaft } from "../../src/replication/index.ts";

export const TOTAL_SHARDS = 16;
export const LIMITS = { maxKeyBytes: 4096, maxValueBytes: 1024 * 1024 };
export const { proto } = loadCairnProto();

/** The leader's store: a real single-node MultiRaft in `dir` that leads every shard. */
export function openLeaderStore(dir: string): Promise<MultiRaft> {
  return MultiRaft.open({
    nodeId: "n1",
    dataDir: dir,
    totalShards: TOTAL_SHARDS,
    tickMs: 20,
    electionTicks: 10,
    heartbeatTicks: 1,
    memtableBytes: 64 * 1024,
    blockCacheBytes: 8 * 1024 * 1024,
  });
}

/** A follower's store: every KV call that needs the leader is refused, naming `leader`. */
export class FollowerStore implements KvStore, AdminStore {
  readonly leader: string | null;
  /** No replica of any shard here (five nodes, three replicas): serializable reads refused too. */
  readonly replica: boolean;
  /** Calls that reached this store (forwarded or not). */
  calls = 0;

  constructor(leader: string | null, replica = true) {
    this.leader = leader;
    this.replica = replica;
  }

  #refuse(): Promise<never> {
    this.calls++;
    return Promise.reject(new NotLeaderError(this.leader === null ? null : nodeId(this.leader)));
  }
  put(): Promise<never> {
    return this.#refuse();
  }
  delete(): Promise<never> {
    return this.#refuse();
  }
  /** A serializable read is served from this replica's (empty) state. */
  get(_key: Uint8Array, linearizable: boolean): Promise<null> {
    return linearizable || !this.replica ? this.#refuse() : Promise.resolve(null);
  }
  scan(): Promise<never> {
    return this.#refuse();
  }
  snapshotShard(): Promise<never> {
    return this.#refuse();
  }
  checkShardId(): void {}
  shardInfo(): null {
    return null;
  }
  transferLeader(): Promise<never> {
    return this.#refuse();
  }
}

/** A follower's store that also names the leader before any call (MultiRaft.leaderElsewhere). */
export class RoutingFollowerStore extends FollowerStore {
  leaderElsewhere(): string | null {
    return this.leader;
  }
}

export type Unary<Res> = (
  md: Metadata,
  opts: CallOptions,
  cb: (err: ServiceError | null, res?: Res) => void,
) => unknown;

export function call<Res>(
  invoke: Unary<Res>,
  opts: CallOptions = {},
  md = new GrpcMetadata(),
): Promise<Res> {
  return new Promise((resolve, reject) =>
    invoke(md, opts, (err, res) => (err === null ? resolve(res as Res) : reject(err))),
  );
}

/**
 * `call`, with the answer's `cairn-served-by` trailer (the node that served it): `invoke` must
 * return the grpc-js call, whose status carries the trailers.
 */
export function callServed<Res>(
  invoke: (
    md: Metadata,
    opts: CallOptions,
    cb: (err: ServiceError | null, res?: Res) => void,
  ) => ClientUnaryCall,
): Promise<{ res: Res; servedBy: string | undefined }> {
  return new Promise((resolve, reject) => {
    let res: Res | undefined;
    const c = invoke(new GrpcMetadata(), {}, (err, r) => {
      if (err === null) res = r as Res;
      else reject(err);
    });
    // grpc-js calls back, then emits the status (with the trailers) at once.
    c.on("status", (s: StatusObject) => {
      if (res === undefined) return;
      const v = s.metadata.get(SERVED_BY_KEY)[0];
      resolve({ res, servedBy: v === undefined ? undefined : String(v) });
    });
  });
}

export function failure(p: Promise<unknown>): Promise<ServiceError> {
  return p.then(
    (r) => assert.fail(`expected a failure, got ${JSON.stringify(r)}`),
    (e: unknown) => e as ServiceError,
  );
}

export function trailer(e: ServiceError, key: string): string | undefined {
  const v = e.metadata.get(key)[0];
  return v === undefined ? undefined : String(v);
}

export const key = (s: string): Buffer => Buffer.from(s);
