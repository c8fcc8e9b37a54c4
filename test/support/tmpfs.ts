/**
 * A small tmpfs for tests of a full or read-only disk: mounted only where the tests run as root
 * with `mount` available (otherwise `tmpfsSkip` says why, for `it(…, { skip })`). Each mount is
 * unmounted by `unmount` (call it in `after`).
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

function probe(): string | false {
  if (process.getuid?.() !== 0) return "needs root to mount a tmpfs";
  const dir = mkdtempSync(join(tmpdir(), "cairn-tmpfs-probe-"));
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", dir], { stdio: "ignore" });
    execFileSync("umount", [dir], { stdio: "ignore" });
    return false;
  } catch {
    return "cannot mount a tmpfs here";
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** False where a tmpfs can be mounted, else the reason the test is skipped. */
export const tmpfsSkip: string | false = probe();

/** Mounts a tmpfs of `size` (e.g. "4m") on a new directory and returns it. */
export function mountTmpfs(size: string): string {
  const dir = mkdtempSync(join(tmpdir(), "cairn-tmpfs-"));
  execFileSync("mount", ["-t", "tmpfs", "-o", `size=${size}`, "tmpfs", dir], { stdio: "ignore" });
  return dir;
}

/** Mounts a tmpfs of `size` on `dir` (made if missing), e.g. a cluster node's data directory. */
export function mountTmpfsOn(dir: string, size: string): void {
  mkdirSync(dir, { recursive: true });
  execFileSync("mount", ["-t", "tmpfs", "-o", `size=${size}`, "tmpfs", dir], { stdio: "ignore" });
}

/** Remounts the tmpfs on `dir` read-only (or read-write again). */
export function remount(dir: string, mode: "ro" | "rw"): void {
  execFileSync("mount", ["-o", `remount,${mode}`, dir], { stdio: "ignore" });
}

/** Unmounts the tmpfs on `dir` and removes the directory. */
export function unmount(dir: string): void {
  try {
    execFileSync("umount", [dir], { stdio: "ignore" });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
