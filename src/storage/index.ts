export * from "./wal/index.ts";
export * from "./lsm/index.ts";
export { CorruptionError } from "./common/index.ts";
