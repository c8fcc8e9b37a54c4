export { crc32c } from "./crc32c.ts";
export { CorruptionError } from "./errors.ts";
export { fsyncDir, fsyncDirSync } from "./fs-util.ts";
