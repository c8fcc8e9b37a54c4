/**
 * Manifest recovery (issue 51, item 3): a damaged last record is told apart from a torn one. A
 * torn tail (a prefix of the record, or zeros: a crash during the append, never acknowledged) is
 * dropped and the tables it may have added are kept aside in `quarantine/`; a record written in
 * full whose checksum fails is refused, naming the manifest and the tables, and nothing is
 * deleted. An orphan table after a clean manifest (a crash before the edit) is still removed.
 */
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { LsmEngine, LsmEnvironment, type LsmOptions } from "../../src/storage/lsm/index.ts";
import { emptyState, Manifest, replayManifest } from "../../src/storage/lsm/manifest.ts";
import { tempDir } from "./helpers.ts";

const SMALL: LsmOptions = { memtableBytes: 1 << 20, l0CompactionTrigger: 100 };
const env = new LsmEnvironment({ workers: 1, blockCacheBytes: 1 << 20 });
after(() => env.close());

const b = (s: string): Buffer => Buffer.from(s, "latin1");

/** Record offsets of a manifest file: u32 length | u32 crc | body. */
function recordOffsets(buf: Buffer): number[] {
  const out: number[] = [];
  for (let at = 0; at + 8 <= buf.length; at += 8 + buf.readUInt32LE(at)) out.push(at);
  return out;
}

/** A manifest of three records; returns its bytes and where its last record starts. */
async function threeRecords(): Promise<{ path: string; buf: Buffer; last: number }> {
  const dir = tempDir("manifest");
  const manifest = await Manifest.create(dir, emptyState(), 1);
  await manifest.append({ flushedSeq: 5, nextFileNumber: 3 });
  await manifest.append({ flushedSeq: 9, nextFileNumber: 4 });
  await manifest.close();
  const path = join(dir, manifest.fileName);
  const buf = readFileSync(path);
  const last = recordOffsets(buf).at(-1) as number;
  return { path, buf, last };
}

const flipped = (buf: Buffer, at: number, mask = 0x01): Buffer => {
  const out = Buffer.from(buf);
  out[at] = (out[at] as number) ^ mask;
  return out;
};

describe("manifest tail verdicts", () => {
  it("reads a last record written in full with a bad checksum as damaged, not torn", async () => {
    const { path, buf, last } = await threeRecords();
    const len = buf.length - last - 8;
    const cases: [string, Buffer][] = [
      ["a body byte", flipped(buf, last + 8 + (len >> 1))],
      ["the body's first byte", flipped(buf, last + 8)],
      ["the body's last byte", flipped(buf, buf.length - 1)],
      ["a checksum byte", flipped(buf, last + 5)],
      ["the length's low byte", flipped(buf, last, 0x04)],
      ["the length's high byte", flipped(buf, last + 3, 0x40)],
      // The last record damaged, then an append after it torn: it was acknowledged.
      [
        "a body byte, a torn record after",
        Buffer.concat([flipped(buf, last + 9), buf.subarray(0, 6)]),
      ],
    ];
    for (const [what, damaged] of cases) {
      const { state, tail } = replayManifest(path, damaged);
      assert.deepEqual(tail, { kind: "damaged", offset: last }, what);
      assert.equal(state.flushedSeq, 5, what);
    }
  });

  it("reads every prefix of the last record, and a zero-filled tail, as torn", async () => {
    const { path, buf, last } = await threeRecords();
    for (let cut = last + 1; cut < buf.length; cut++) {
      const { state, tail } = replayManifest(path, buf.subarray(0, cut));
      assert.deepEqual(tail, { kind: "torn", offset: last }, `cut at ${cut}`);
      assert.equal(state.flushedSeq, 5);
    }
    const zeros = replayManifest(path, Buffer.concat([buf, Buffer.alloc(4096)]));
    assert.deepEqual(zeros.tail, { kind: "torn", offset: buf.length });
    assert.equal(zeros.state.flushedSeq, 9);
    assert.equal(replayManifest(path, buf).tail, undefined);
  });
});

/** An engine with one table from an earlier open, then a second flushed by the last edit. */
async function engineWithLastFlush(): Promise<{ dir: string; manifest: string; table: string }> {
  const dir = tempDir("lsm-manifest");
  let engine = await LsmEngine.open(dir, env, SMALL);
  await engine.write(1, [{ type: "put", key: b("a"), value: b("old") }]);
  await engine.flush();
  await engine.close();
  engine = await LsmEngine.open(dir, env, SMALL);
  const before = new Set(readdirSync(dir));
  await engine.write(2, [{ type: "put", key: b("a"), value: b("new") }]);
  await engine.write(3, [{ type: "put", key: b("b"), value: b("only here") }]);
  await engine.flush();
  await engine.close();
  const table = readdirSync(dir).find((n) => n.endsWith(".sst") && !before.has(n));
  const manifest = readdirSync(dir).find((n) => n.startsWith("MANIFEST-"));
  assert.ok(table !== undefined && manifest !== undefined);
  return { dir, manifest: join(dir, manifest), table };
}

describe("LSM open after a damaged or torn manifest tail", () => {
  it("refuses a damaged last record, naming the manifest and the table, and deletes nothing", async () => {
    const { dir, manifest, table } = await engineWithLastFlush();
    const buf = readFileSync(manifest);
    const last = recordOffsets(buf).at(-1) as number;
    const damaged = flipped(buf, last + 8 + ((buf.length - last - 8) >> 1));
    writeFileSync(manifest, damaged);
    const files = readdirSync(dir).sort();
    for (let attempt = 0; attempt < 2; attempt++) {
      await assert.rejects(LsmEngine.open(dir, env, SMALL), (err: Error & { code?: string }) => {
        assert.equal(err.code, "CAIRN_ERR_CORRUPTION");
        assert.ok(err.message.includes(`${manifest} at offset ${last}`), err.message);
        assert.match(err.message, /last manifest record damaged/);
        assert.ok(err.message.includes(table), err.message);
        return true;
      });
      assert.deepEqual(readdirSync(dir).sort(), files);
      assert.deepEqual(readFileSync(manifest), damaged);
    }
    // Repaired, every write is there.
    writeFileSync(manifest, buf);
    const engine = await LsmEngine.open(dir, env, SMALL);
    assert.equal(engine.get(b("a"))?.toString(), "new");
    assert.equal(engine.get(b("b"))?.toString(), "only here");
    await engine.close();
  });

  it("drops a torn last record and keeps the tables it may add in quarantine/", async () => {
    const { dir, manifest, table } = await engineWithLastFlush();
    const buf = readFileSync(manifest);
    const last = recordOffsets(buf).at(-1) as number;
    const torn = buf.subarray(0, last + 8 + ((buf.length - last - 8) >> 1));
    writeFileSync(manifest, torn);
    const name = manifest.slice(dir.length + 1);
    const into = join(dir, "quarantine", name);

    const engine = await LsmEngine.open(dir, env, SMALL);
    // The torn edit is not applied: the caller replays its log above flushedSeq.
    assert.equal(engine.flushedSeq, 1);
    assert.equal(engine.get(b("a"))?.toString(), "old");
    assert.deepEqual(engine.quarantined, [join(into, name), join(into, table)]);
    assert.ok(!existsSync(join(dir, table)));
    assert.deepEqual(readFileSync(join(into, name)), torn);
    assert.ok(existsSync(join(into, table)));
    // A new table does not take the kept-aside table's number.
    await engine.write(2, [{ type: "put", key: b("c"), value: b("v") }]);
    await engine.flush();
    await engine.close();
    assert.ok(!existsSync(join(dir, table)));
    const again = await LsmEngine.open(dir, env, SMALL);
    assert.deepEqual(again.quarantined, []);
    assert.equal(again.get(b("c"))?.toString(), "v");
    await again.close();
    assert.deepEqual(readdirSync(into).sort(), [name, table].sort());
  });

  it("still removes an orphan table after a clean manifest (a crash before its edit)", async () => {
    const { dir } = await engineWithLastFlush();
    writeFileSync(join(dir, "000099.sst"), "a flush's output whose edit never came");
    const engine = await LsmEngine.open(dir, env, SMALL);
    assert.deepEqual(engine.quarantined, []);
    await engine.close();
    assert.ok(!existsSync(join(dir, "000099.sst")));
    assert.ok(!existsSync(join(dir, "quarantine")));
  });
  it("keeps the tables no edit names when the manifest is behind the caller's log, and reuses none of their numbers", async () => {
    const { dir, manifest, table } = await engineWithLastFlush();
    const buf = readFileSync(manifest);
    // Cut at a record boundary: the last edit (the flush adding `table`, up to 3) lost whole.
    writeFileSync(manifest, buf.subarray(0, recordOffsets(buf).at(-1)));
    const kept = readFileSync(join(dir, table));
    // The log dropped its entries up to 3 (the lost edit's flush held them): `table` is their
    // only copy, not a crash's orphan.
    const engine = await LsmEngine.open(dir, env, { ...SMALL, logDroppedThrough: 3 });
    assert.equal(engine.flushedSeq, 1);
    assert.deepEqual(readFileSync(join(dir, table)), kept);
    await engine.write(2, [{ type: "put", key: b("c"), value: b("v") }]);
    await engine.flush();
    await engine.close();
    assert.deepEqual(readFileSync(join(dir, table)), kept, "a new table took its number");
    // A log that dropped nothing past what the manifest holds: an orphan, removed as before.
    const again = await LsmEngine.open(dir, env, { ...SMALL, logDroppedThrough: 2 });
    await again.close();
    assert.ok(!existsSync(join(dir, table)));
  });
});
