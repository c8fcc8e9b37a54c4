export * from "./wal/index.ts";
export * from "./lsm/index.ts";
export {
  crc32c,
  CorruptionError,
  ensureDir,
  MemoryFileSystem,
  nodeFileSystem,
  type CrashOptions,
  type FileSystem,
  type FsFile,
  type FsOperation,
  type OpenFlags,
} from "./common/index.ts";
