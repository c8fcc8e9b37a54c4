/**
 * Operations: what operators see of a node — JSON logs, the metrics registry, the health
 * interfaces and the HTTP server for /health/quick, /health and /metrics. See docs/operations.md.
 */

// Logs (design.md §7).
export {
  createLogger,
  fdSink,
  formatLine,
  isLogLevel,
  LEVELS as LOG_LEVELS,
  type LogFields,
  type Logger,
  type LoggerOptions,
  type LogLevel,
  type LogSink,
  LogWindow,
  silentLogger,
} from "./log.ts";

// Metrics (contract §4.4).
export {
  CairnMetrics,
  type CairnMetricsOptions,
  KV_DURATION_BUCKETS_MS,
  KV_OPERATIONS,
  KV_STATUSES,
  type KvOperation,
  type KvResult,
  type KvStatus,
  METRICS_CONTENT_TYPE,
} from "./metrics.ts";

// Health (contract §2.1–2.3), implemented by the node.
export {
  healthHttpStatus,
  type HealthReport,
  type HealthSource,
  type MemberHealth,
  type NodeHealthStatus,
  type ShardHealth,
  type ShardHealthStatus,
} from "./health.ts";

// The HTTP server and its start-up errors.
export { AddressInUseError, BindError, bindErrorFor } from "./errors.ts";
export { OpsHttpServer, type OpsHttpServerOptions } from "./http-server.ts";
