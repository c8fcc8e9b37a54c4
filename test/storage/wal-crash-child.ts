/**
 * Child process of the WAL crash test: a deterministic workload of appends, hard states and
 * compactions over 8 shards with tiny segments (rotations and deletions all the time), one sync
 * per step. After each sync resolves it prints "a <step>": everything up to that step is
 * acknowledged. Not a test file itself.
 *
 * With CAIRN_WAL_CRASH set, the WAL's file system is wrapped and the process SIGKILLs itself just
 * before a chosen operation, counted from a landmark the op-counting shim cannot see:
 *  - `rotation:<k>:<n>`: the n-th file-system operation after the k-th segment rotation created
 *    its file (1 = before the checkpoint write, ...);
 *  - `unlink:<k>`: the k-th segment deletion;
 *  - `truncate:<k>:<n>`: the n-th file-system operation after the k-th truncate began (0 = the
 *    truncate itself). Opening preallocates (truncate 1); each rotation cuts the old segment
 *    back to its records, then preallocates the new one (truncates 2k and 2k + 1).
 */
import { nodeFileSystem, type FileSystem, type FsFile } from "../../src/storage/common/index.ts";
import { Wal } from "../../src/storage/wal/index.ts";
import { walStep } from "./wal-workload.ts";

function crashingFs(spec: string): FileSystem {
  const [mode, a, b] = spec.split(":");
  const k = Number(a);
  const n = Number(b);
  let rotations = 0;
  let unlinks = 0;
  let truncates = 0;
  /** Operations since the k-th rotation created its segment, or -1 before that. */
  let since = -1;
  const step = (op: string): void => {
    if (mode === "unlink" && op === "unlink" && ++unlinks === k) die();
    if (mode === "truncate" && op === "truncate" && ++truncates === k) {
      if (n === 0) die();
      since = 0;
      return;
    }
    if (since >= 0 && ++since === n) die();
  };
  const die = (): never => {
    process.kill(process.pid, "SIGKILL");
    throw new Error("unreachable");
  };
  const wrapFile = (file: FsFile): FsFile => ({
    write: (...args) => (step("write"), file.write(...args)),
    // The WAL writes small batches with it: crash points land on those writes too.
    ...(file.writeNow === undefined
      ? {}
      : {
          writeNow: (...args: Parameters<NonNullable<FsFile["writeNow"]>>) => (
            step("write"),
            (file.writeNow as NonNullable<FsFile["writeNow"]>)(...args)
          ),
        }),
    truncate: (length) => (step("truncate"), file.truncate(length)),
    sync: () => (step("sync"), file.sync()),
    datasync: () => (step("datasync"), file.datasync()),
    close: () => (step("close"), file.close()),
  });
  return {
    mkdirp: (dir) => (step("mkdirp"), nodeFileSystem.mkdirp(dir)),
    readdir: (dir) => (step("readdir"), nodeFileSystem.readdir(dir)),
    readFile: (path) => (step("readFile"), nodeFileSystem.readFile(path)),
    async open(path, flags) {
      step("open");
      const file = wrapFile(await nodeFileSystem.open(path, flags));
      // Exclusive creation is what a rotation does (opening creates without O_EXCL).
      if (mode === "rotation" && flags.exclusive === true && ++rotations === k) since = 0;
      return file;
    },
    unlink: (path) => (step("unlink"), nodeFileSystem.unlink(path)),
    fsyncDir: (dir) => (step("fsyncDir"), nodeFileSystem.fsyncDir(dir)),
  };
}

const [dir, countText] = process.argv.slice(2) as [string, string];
const spec = process.env["CAIRN_WAL_CRASH"];
const wal = await Wal.open(dir, {
  segmentBytes: 2048,
  ...(spec === undefined ? {} : { fs: crashingFs(spec) }),
});
for (let step = 1; step <= Number(countText); step++) {
  walStep(wal, step);
  await wal.sync();
  process.stdout.write(`a ${step}\n`);
}
await wal.close();
