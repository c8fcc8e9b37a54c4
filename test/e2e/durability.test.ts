/**
 * Durability, end to end: clients write keys and record every acknowledged write; the server is
 * killed with SIGKILL at a random moment (after a random number of acknowledgements, with writes
 * in flight); after a restart every acknowledged write must be there with its version.
 * DURABILITY_CYCLES=N runs more cycles (default 6; half as many with shard workers, whose
 * node keeps one WAL per worker and answers a call through another worker than its shard's).
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { seededRng } from "../../src/common/rng.ts";
import { connect } from "../support/grpc-client.ts";
import { startServer } from "../support/server-process.ts";

const CYCLES = Number(process.env.DURABILITY_CYCLES ?? "6");
const SEED = Number(process.env.DURABILITY_SEED ?? String(Date.now() % 1_000_000));
/** The fewest acknowledgements before a kill: 3 cycles of it leave well over 100 keys written. */
const KILL_FLOOR = 60;
let dir: string;

describe("durability across SIGKILL", () => {
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cairn-e2e-dur-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  for (const [setting, env, cycles] of [
    ["", {}, CYCLES],
    [", shard_workers 2", { CAIRN_SHARD_WORKERS: "2" }, Math.ceil(CYCLES / 2)],
  ] as const) {
    it(`keeps every acknowledged write through ${cycles} kill -9 cycles${setting} (seed ${SEED})`, async () => {
      const data = await mkdtemp(join(dir, "node-"));
      // The kill points come from a stream of their own, so a seed replays them whatever order
      // the writers drew their keys in; each is at least KILL_FLOOR acknowledgements, so that even
      // the fewest cycles (3) acknowledge the keys the last check asks for, whatever the seed
      // (seed 271699 killed after 28, and 95–99 keys over 3 cycles).
      const kills = seededRng(SEED);
      const rng = seededRng(SEED + 1);
      // Each key has one writer, so its writes are ordered. A key must read as its last
      // acknowledged write, or as a later write whose outcome was indeterminate (in flight at a kill).
      const acked = new Map<string, { value: string; index: number }>();
      const maybe = new Map<string, string[]>();
      let writes = 0;

      const verify = async (
        call: (key: string) => Promise<{ value: string; index: number } | null>,
        when: string,
      ): Promise<void> => {
        for (const key of new Set([...acked.keys(), ...maybe.keys()])) {
          const want = acked.get(key);
          const got = await call(key);
          const allowed = maybe.get(key) ?? [];
          if (got !== null && allowed.includes(got.value)) {
            // An indeterminate write took effect: from now on it is the key's state.
            acked.set(key, got);
          } else if (want !== undefined) {
            assert.equal(
              got?.value,
              want.value,
              `${when}: acknowledged write of ${key} lost (seed ${SEED})`,
            );
            assert.equal(got?.index, want.index);
          } else {
            assert.equal(got, null, `${when}: ${key} holds a value never written (seed ${SEED})`);
          }
          maybe.delete(key);
        }
      };

      for (let cycle = 0; cycle <= cycles; cycle++) {
        const server = await startServer({ dataDir: data, env });
        const c = connect(server.rpc);
        try {
          // Read everything back with a linearizable scan (pages of up to 10000 keys).
          const state = new Map<string, { value: string; index: number }>();
          let token: Buffer = Buffer.alloc(0);
          do {
            const page = await c.call(c.kv, "Scan", {
              prefix: Buffer.from("k"),
              limit: 10_000,
              page_token: token,
            });
            for (const item of page["items"] as {
              key: Buffer;
              value: Buffer;
              version: { index: number };
            }[]) {
              state.set(item.key.toString(), {
                value: item.value.toString(),
                index: item.version.index,
              });
            }
            token = page["next_page_token"] as Buffer;
          } while (token.length > 0);
          await verify(async (key) => state.get(key) ?? null, `after restart ${cycle}`);
          if (cycle === cycles) break; // the last start only verifies
          // Write until a random number of acknowledgements, then kill with writes in flight.
          const killAfter = KILL_FLOOR + kills.int(300);
          let acks = 0;
          let killed = false;
          await new Promise<void>((resolve) => {
            const writer = async (w: number): Promise<void> => {
              while (!killed) {
                const key = `k${w}-${rng.int(200)}`;
                const value = `c${cycle}-w${w}-${writes++}`;
                try {
                  const res = await c.call(
                    c.kv,
                    "Put",
                    { key: Buffer.from(key), value: Buffer.from(value) },
                    5_000,
                  );
                  // Answered, even if after the kill was sent: acknowledged.
                  acked.set(key, { value, index: (res["version"] as { index: number }).index });
                  maybe.delete(key);
                  if (++acks === killAfter) {
                    killed = true;
                    server.proc.kill("SIGKILL");
                    resolve();
                  }
                } catch {
                  // The server died under this write: indeterminate, it may or may not be applied.
                  maybe.set(key, [...(maybe.get(key) ?? []), value]);
                  return;
                }
              }
            };
            for (let w = 0; w < 8; w++) void writer(w);
          });
          const exit = await server.exited;
          assert.equal(exit.signal, "SIGKILL");
        } finally {
          c.close();
          await server.stop("SIGKILL");
        }
      }
      assert.ok(acked.size > 100, `only ${acked.size} keys were acknowledged`);
    });
  }
});
