/**
 * Found by the driver simulation (seed 467): a dsync write whose settling straddled a crash
 * resolved as durable while the crash had already taken it (the durable effect landed in the
 * post-crash state), so the WAL acknowledged a commit that recovery then cut as a torn tail.
 * Whatever microtask a crash lands on, an operation either rejects or its effect survives.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { MemoryFileSystem } from "../../src/storage/index.ts";

async function ticks(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await undefined;
}

describe("MemoryFileSystem and a crash during an operation", () => {
  for (let k = 0; k <= 6; k++) {
    it(`a dsync write with a crash ${k} microtasks in: rejected, or durable`, async () => {
      const fs = new MemoryFileSystem();
      await fs.mkdirp("/d");
      await fs.fsyncDir("/");
      const file = await fs.open("/d/f", { create: true, dsync: true });
      await fs.fsyncDir("/d");
      const outcome = file.write(Buffer.from("hello"), 0, 5, 0).then(
        () => "resolved",
        () => "rejected",
      );
      await ticks(k);
      fs.crash();
      const result = await outcome;
      const after = (await fs.readFile("/d/f")).toString();
      if (result === "resolved") assert.equal(after, "hello", "a resolved dsync write survives");
      else assert.equal(after, "");
    });

    it(`an fsyncDir with a crash ${k} microtasks in: rejected, or the entry survives`, async () => {
      const fs = new MemoryFileSystem();
      await fs.mkdirp("/d");
      await fs.fsyncDir("/");
      const file = await fs.open("/d/f", { create: true });
      await file.close();
      const outcome = fs.fsyncDir("/d").then(
        () => "resolved",
        () => "rejected",
      );
      await ticks(k);
      fs.crash();
      const result = await outcome;
      const names = await fs.readdir("/d");
      if (result === "resolved") assert.deepEqual(names, ["f"]);
      else assert.deepEqual(names, []);
    });
  }
});
