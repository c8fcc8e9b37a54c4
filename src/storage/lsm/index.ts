export {
  LsmEngine,
  type Backpressure,
  type LsmOptions,
  type LsmSnapshot,
  type LsmStats,
  type ScanOptions,
  type WriteOp,
} from "./engine.ts";
export {
  decodeSnapshotStream,
  encodeSnapshotFrames,
  expectImageSeq,
  MAX_FRAME_BODY_BYTES,
  SNAPSHOT_BUFFERS,
  snapshotImageSeq,
} from "./snapshot-stream.ts";
export { LsmEnvironment, type LsmEnvironmentOptions } from "./environment.ts";
export { COMPACTION_DURATION_BUCKETS_MS, NO_METRICS, type LsmMetrics } from "./metrics.ts";
