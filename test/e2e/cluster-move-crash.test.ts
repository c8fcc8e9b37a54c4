/**
 * Crash points of a replica move (design.md §5.2), with real processes on loopback: a fourth
 * node joins a three-node cluster under writes, and while the allocator moves replicas onto it
 * one at a time, the test SIGKILLs, at each step of a move (learner added, promoted, old replica
 * removed, move settled), in turn the move's source, its destination and the meta group's
 * leader, and restarts it. Every node holds each step for a moment (the testing-only
 * CAIRN_TESTING_MOVE_STEP_HOLD_MS), so the kill lands where it is meant to, and not a step
 * later.
 *
 * In `npm test` (about two and a half minutes); alone: `npm run test:move-crash`.
 *
 * Checked: writes keep being acknowledged throughout (a move never leaves a shard without a
 * quorum of caught-up voters: every kill leaves each group a quorum); at the end every shard
 * has exactly three replicas on distinct nodes and the replicas are even; then each old node
 * restarts beside the dormant replicas the moves left it (groups that moved on without them),
 * every node is healthy, and every acknowledged write reads back through every node.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  acknowledgedPuts,
  clusterView,
  eventually,
  LocalCluster,
  readBackDifference,
} from "../support/cluster-process.ts";

/** The steps a group's leader logs ("replica change"), in the order a move takes them. */
const STEPS = ["add-learner", "add-voter", "remove", "settle"] as const;
type Step = (typeof STEPS)[number];
type Role = "source" | "destination" | "meta leader";

interface LogRecord {
  readonly message?: string;
  readonly fields?: Record<string, unknown>;
}

function records(lines: readonly string[], from: number): LogRecord[] {
  const out: LogRecord[] = [];
  for (const line of lines.slice(from)) {
    try {
      out.push(JSON.parse(line) as LogRecord);
    } catch {
      // not a log record
    }
  }
  return out;
}

describe("a move's crash points (real processes)", () => {
  it(
    "SIGKILL of the source, the destination and the meta leader at each step of a move: every move completes, nothing is lost; old nodes restart healthy beside their dormant replicas",
    { timeout: 600_000 },
    async (t) => {
      const dir = await mkdtemp(join(tmpdir(), "cairn-e2e-move-crash-"));
      const cluster = await LocalCluster.create(dir, 4, {
        CAIRN_CLUSTER_TOTAL_SHARDS: "16",
        CAIRN_CLUSTER_REBALANCE_TOLERANCE: "1",
        CAIRN_CLUSTER_REBALANCE_MAX_MOVES: "1",
        CAIRN_TESTING_MOVE_STEP_HOLD_MS: "800",
      });
      const { acknowledged, put } = acknowledgedPuts();
      let writing = true;
      let written = 0;
      /**
       * Writes through the running nodes in turn, each acknowledged write recorded, paced at
       * about 40 a second: unpaced, the ~100 s of kills and moves took ~20,000 writes (and
       * 80,000 Gets to read them back), a core of the test machine's two for the test's whole
       * length, and proved nothing more.
       */
      const writer = async (): Promise<void> => {
        for (let i = 0; writing; i++) {
          const running = cluster.running().filter((n) => n.client !== null);
          const c = running[i % Math.max(1, running.length)]?.client;
          if (c === undefined || c === null) {
            await new Promise((r) => setTimeout(r, 50));
            continue;
          }
          try {
            await put(c, `w${i}`, `v${i}`);
            written++;
          } catch {
            // The node was killed under the call: its outcome is unknown, and never checked.
          }
          await new Promise((r) => setTimeout(r, 25));
        }
      };
      try {
        await Promise.all(["n1", "n2", "n3"].map((id) => cluster.start(id)));
        await cluster.ready();
        const c1 = cluster.node("n1").client;
        assert.ok(c1 !== null);
        for (let i = 0; i < 32; i++) await put(c1, `k${i}`, `v${i}`);
        const writing1 = writer();
        await cluster.start("n4");

        // Where each node's log has been read up to.
        const cursor = new Map<string, number>();
        /** The moves the allocator started, by shard: its nodes before and after. */
        const moves = new Map<number, { from: string[]; to: string[] }>();
        /** The next step logged anywhere after the cursors, with the move it belongs to. */
        const nextStep = (
          want: Step,
        ): { shard: number; source: string; destination: string } | null => {
          let found: { shard: number; source: string; destination: string } | null = null;
          for (const n of cluster.nodes) {
            const lines = n.server?.lines ?? [];
            const from = cursor.get(n.id) ?? 0;
            for (const r of records(lines, from)) {
              const f = r.fields ?? {};
              const shard = Number(f["shard_id"]);
              if (r.message === "moving a shard") {
                moves.set(shard, {
                  from: (f["from"] as string[] | undefined) ?? [],
                  to: (f["to"] as string[] | undefined) ?? [],
                });
              } else if (
                r.message === "replica change" &&
                f["step"] === want &&
                shard !== 0 &&
                found === null
              ) {
                const move = moves.get(shard);
                const source = move?.from.find((x) => !move.to.includes(x));
                const destination = move?.to.find((x) => !move.from.includes(x));
                if (source !== undefined && destination !== undefined) {
                  found = { shard, source, destination };
                }
              }
            }
            cursor.set(n.id, lines.length);
          }
          return found;
        };

        const kills: string[] = [];
        const roles: Role[] = ["source", "destination", "meta leader"];
        for (const role of roles) {
          for (const step of STEPS) {
            let hit: { shard: number; source: string; destination: string } | null = null;
            await eventually(
              `a move reaches step ${step}`,
              async () => {
                hit = nextStep(step);
                return hit !== null;
              },
              90_000,
            );
            assert.ok(hit !== null);
            const { shard, source, destination } = hit;
            let victim = role === "source" ? source : role === "destination" ? destination : "";
            if (role === "meta leader") {
              await eventually("the meta group has a leader", async () => {
                const c = cluster.running().find((n) => n.client !== null)?.client;
                if (c === undefined || c === null) return false;
                victim = (await clusterView(c)).shards.find((s) => s.id === 0)?.leader ?? "";
                return victim !== "";
              });
            }
            kills.push(`${role} ${victim} after ${step} of shard ${shard}`);
            t.diagnostic(`${kills.at(-1)} (${written} writes acknowledged)`);
            if (cluster.node(victim).server === null) continue;
            await cluster.stop(victim, "SIGKILL");
            cursor.set(victim, 0);
            await cluster.start(victim);
          }
        }
        assert.equal(kills.length, roles.length * STEPS.length, kills.join("\n"));

        // Every move finishes: replicas even over the four nodes, every shard on three distinct
        // nodes, every node healthy.
        let last = "";
        await eventually(
          "the moves finish: replicas even, every shard on three distinct nodes",
          async () => {
            const c = cluster.node("n1").client;
            if (c === null) return false;
            const view = (await clusterView(c)) as unknown as {
              nodes: { id: string; replicas: number }[];
              shards: { id: number; replicas: string[] }[];
            };
            const counts = view.nodes.map((n) => n.replicas);
            last = JSON.stringify({ nodes: view.nodes, shards: view.shards });
            return (
              counts.length === 4 &&
              Math.max(...counts) - Math.min(...counts) <= 1 &&
              view.shards.every((s) => s.replicas.length === 3 && new Set(s.replicas).size === 3)
            );
          },
          120_000,
        ).catch((err: unknown) => {
          t.diagnostic(`the view last seen: ${last}`);
          throw err;
        });
        writing = false;
        await writing1;
        assert.ok(written > 0, "writes were acknowledged during the moves");
        // Each old node restarts after moves took replicas off it: its dormant replicas open
        // again, in groups that moved on without them (no leader will ever talk to them). The
        // node serves every shard placed on it, so it is healthy.
        for (const id of ["n1", "n2", "n3"]) {
          await cluster.stop(id, "SIGKILL");
          await cluster.start(id);
        }
        await eventually("every node is healthy", () => cluster.allHealthy(), 90_000);
        for (const n of cluster.running()) {
          const c = n.client;
          assert.ok(c !== null);
          assert.equal(await readBackDifference(c, acknowledged), null, `through ${n.id}`);
        }
      } finally {
        writing = false;
        await cluster.killAll();
        await rm(dir, { recursive: true, force: true });
      }
    },
  );
});
