import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  META_VOTERS_FILE,
  MetaVotersRecord,
  readMetaVoters,
} from "../../src/replication/meta-voters.ts";
import { type FileSystem, nodeFileSystem } from "../../src/storage/index.ts";

const fs = nodeFileSystem;

/** nodeFileSystem, counting the files it opens. */
function countingFs(): { fs: FileSystem; opened: () => number } {
  let opened = 0;
  return {
    fs: {
      ...nodeFileSystem,
      open(path, flags) {
        opened++;
        return nodeFileSystem.open(path, flags);
      },
    },
    opened: () => opened,
  };
}

const noFailure = (err: unknown): never => assert.fail(String(err));

describe("the meta group's voters' record (meta-voters.ts)", () => {
  let root: string;
  before(async () => {
    root = await mkdtemp(join(tmpdir(), "cairn-meta-voters-"));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it("holds the voters last noted, one node a line, sorted, then a checksum; none is no record", async () => {
    const dir = await mkdtemp(join(root, "d-"));
    assert.equal(await readMetaVoters(fs, dir), null);
    const record = new MetaVotersRecord(fs, dir, noFailure);
    record.note(["n3", "n1", "n2", "n1"]);
    // Noted while the first write is under way: the newest wins.
    record.note(["n4", "n2"]);
    await record.settled();
    assert.match(
      await readFile(join(dir, META_VOTERS_FILE), "utf8"),
      /^n2\nn4\ncrc32c [0-9a-f]{8}\n$/,
    );
    assert.deepEqual(await readMetaVoters(fs, dir), ["n2", "n4"]);
  });

  it("a torn or altered record reads as none (it is rewritten in place)", async () => {
    const dir = await mkdtemp(join(root, "d-"));
    const record = new MetaVotersRecord(fs, dir, noFailure);
    record.note(["n1", "n2", "n3"]);
    await record.settled();
    const path = join(dir, META_VOTERS_FILE);
    const whole = await readFile(path, "utf8");
    for (const damaged of [
      "",
      whole.slice(0, 6),
      whole.slice(0, -1),
      whole.replace("n2", "n9"),
      "\0".repeat(whole.length),
    ]) {
      await writeFile(path, damaged);
      assert.equal(await readMetaVoters(fs, dir), null, JSON.stringify(damaged));
    }
  });

  it("ignores an empty configuration: a replica that has not learnt its own keeps the record", async () => {
    const dir = await mkdtemp(join(root, "d-"));
    const record = new MetaVotersRecord(fs, dir, noFailure);
    record.note(["n1", "n2"]);
    await record.settled();
    record.note([]);
    await record.settled();
    assert.deepEqual(await readMetaVoters(fs, dir), ["n1", "n2"]);
  });

  it("a restart with the same voters writes nothing; changed ones are written", async () => {
    const dir = await mkdtemp(join(root, "d-"));
    const first = new MetaVotersRecord(fs, dir, noFailure);
    first.note(["n1", "n2", "n3"]);
    await first.settled();
    const counting = countingFs();
    const again = new MetaVotersRecord(counting.fs, dir, noFailure);
    again.note(["n3", "n2", "n1"]);
    await again.settled();
    assert.equal(counting.opened(), 0, "not rewritten");
    again.note(["n1", "n3"]);
    await again.settled();
    assert.equal(counting.opened(), 1, "rewritten");
    assert.deepEqual(await readMetaVoters(fs, dir), ["n1", "n3"]);
  });

  it("a write that fails is handed to the driver's failure", async () => {
    const failures: unknown[] = [];
    const record = new MetaVotersRecord(fs, join(root, "missing", "dir"), (err) =>
      failures.push(err),
    );
    record.note(["n1", "n2"]);
    await record.settled();
    assert.equal(failures.length, 1);
    assert.equal((failures[0] as NodeJS.ErrnoException).code, "ENOENT");
  });
});
