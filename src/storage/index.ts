export * from "./wal/index.ts";
export * from "./lsm/index.ts";
export {
  crc32c,
  CorruptionError,
  ensureDir,
  fsyncDir,
  MemoryFileSystem,
  nodeFileSystem,
  type CrashOptions,
  type FileSystem,
  type FsFile,
  type FsOperation,
  type OpenFlags,
  writeFileDurably,
} from "./common/index.ts";
