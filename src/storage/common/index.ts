export { crc32c } from "./crc32c.ts";
export { CorruptionError } from "./errors.ts";
export { nodeFileSystem, type FileSystem, type FsFile, type OpenFlags } from "./file-system.ts";
export { ensureDir } from "./ensure-dir.ts";
export { threadRunDelayClock, type RunDelayClock } from "./run-delay.ts";
export { fsyncDir, fsyncDirSync, writeFileDurably } from "./fs-util.ts";
export { MemoryFileSystem, type CrashOptions, type FsOperation } from "./memory-fs.ts";
