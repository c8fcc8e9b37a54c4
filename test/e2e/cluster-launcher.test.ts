/**
 * `npm run cluster` end to end: the launcher (scripts/cluster.ts) starts three real `cairn serve`
 * processes on loopback, says the cluster is ready once every /health/quick answers 200, the
 * nodes see each other alive (/health `nodes` and `cairn cluster`), and SIGTERM to the launcher
 * stops every node with exit code 0. Every wait is a poll with a deadline.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, it } from "node:test";
import { CAIRN, cleanEnv, ROOT } from "../support/server-process.ts";
import { eventually, freePort } from "../support/cluster-process.ts";

describe("npm run cluster", () => {
  let dir = "";
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cairn-cluster-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("says how to restart a node that died, and that command brings it back", async () => {
    const rpcPort = await freePort("0.0.0.0");
    let httpPort = await freePort("0.0.0.0");
    while (Math.abs(httpPort - rpcPort) < 2) httpPort = await freePort("0.0.0.0");
    const base = join(dir, "restart");
    const launcher = spawn(
      process.execPath,
      [
        join(ROOT, "scripts/cluster.ts"),
        "--nodes",
        "1",
        "--base-dir",
        base,
        "--fresh",
        "--rpc-port",
        String(rpcPort),
        "--http-base-port",
        String(httpPort),
        "--wait-ms",
        "12000",
      ],
      // A setting of the launcher's environment (README: shorten cluster.dead_after_ms so):
      // every node has it, and so must a node restarted by the command the launcher prints.
      {
        cwd: ROOT,
        // A CLI's bearer token in the environment: a secret, not a node's setting.
        env: cleanEnv({ CAIRN_CLUSTER_DEAD_AFTER_MS: "20000", CAIRN_TOKEN: "s3cret-token" }),
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    const lines: string[] = [];
    createInterface({ input: launcher.stdout }).on("line", (l) => lines.push(l));
    const exited = new Promise<number | null>((resolve) =>
      launcher.once("exit", (code) => resolve(code)),
    );
    let restarted: ReturnType<typeof spawn> | null = null;
    try {
      await eventually("the cluster is ready", async () => {
        if (launcher.exitCode !== null) assert.fail(lines.join("\n"));
        return lines.some((l) => l.startsWith("cluster ready: 1 node(s)"));
      });
      const http = /^n1\s+rpc \S+\s+http http:\/\/(\S+)/.exec(
        lines.find((l) => l.startsWith("n1 ")) ?? "",
      )?.[1];
      assert.ok(http !== undefined, lines.join("\n"));
      await fetch(`http://${http}/health/quick`); // a request, so the node has served one
      process.kill(Number(readFileSync(join(base, "n1.pid"), "utf8")), "SIGKILL");
      let hint = "";
      await eventually("the launcher says how to restart n1", async () => {
        hint =
          /restart it .*: (.+ serve)$/.exec(
            lines.find((l) => l.includes("restart it")) ?? "",
          )?.[1] ?? "";
        return hint !== "";
      });
      assert.match(hint, /(^| )CAIRN_CLUSTER_DEAD_AFTER_MS=20000 /, hint);
      assert.doesNotMatch(hint, /s3cret-token/, "the restart command prints no token");
      // Its one node dead, the launcher has nothing left to run: it says so and fails (it ended
      // at once, exit code 0 and no word, the node's death untold by its exit code).
      assert.equal(await exited, 1, lines.join("\n"));
      await eventually("the launcher's last lines are read", async () =>
        lines.includes("n1 exited with signal SIGKILL"),
      );
      assert.ok(
        lines.includes("every node has exited: the launcher stops (exit code 1)"),
        lines.join("\n"),
      );
      restarted = spawn("sh", ["-c", `exec ${hint}`], {
        cwd: ROOT,
        env: cleanEnv(),
        stdio: ["ignore", "pipe", "pipe"],
      });
      let log = "";
      restarted.stdout?.on("data", (d: Buffer) => (log += d.toString()));
      restarted.stderr?.on("data", (d: Buffer) => (log += d.toString()));
      await eventually("the restarted n1 answers /health/quick with 200", async () => {
        if (restarted?.exitCode !== null) assert.fail(`${hint}\n${log}`);
        return fetch(`http://${http}/health/quick`).then(
          (r) => r.status === 200,
          () => false,
        );
      });
    } finally {
      if (restarted !== null && restarted.exitCode === null) {
        const gone = new Promise((r) => restarted?.once("exit", r));
        restarted.kill("SIGTERM");
        await gone;
      }
      if (launcher.exitCode === null) launcher.kill("SIGTERM");
      await exited;
    }
  });

  it("starts 3 nodes that see each other, and stops them all with exit code 0", async () => {
    const rpcPort = await freePort("0.0.0.0");
    let httpPort = await freePort("0.0.0.0");
    while (Math.abs(httpPort - rpcPort) < 3) httpPort = await freePort("0.0.0.0");
    const launcher = spawn(
      process.execPath,
      [
        join(ROOT, "scripts/cluster.ts"),
        "--nodes",
        "3",
        "--base-dir",
        join(dir, "cluster"),
        "--fresh",
        "--rpc-port",
        String(rpcPort),
        "--http-base-port",
        String(httpPort),
        "--wait-ms",
        "12000",
      ],
      { cwd: ROOT, env: cleanEnv(), stdio: ["ignore", "pipe", "pipe"] },
    );
    const lines: string[] = [];
    let stderr = "";
    launcher.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    createInterface({ input: launcher.stdout }).on("line", (l) => lines.push(l));
    const exited = new Promise<number | null>((resolve) =>
      launcher.once("exit", (code) => resolve(code)),
    );
    const output = (): string =>
      `${lines.filter((l) => !/^n\d \| /.test(l)).join("\n")}\n${stderr}`;
    try {
      await eventually(
        "the launcher reports the cluster ready",
        async () => {
          if (launcher.exitCode !== null) assert.fail(`launcher exited early:\n${output()}`);
          return lines.some((l) => l.startsWith("cluster ready: 3 node(s)"));
        },
        15_000,
      );
      // One line per node with its endpoints, before the logs.
      const nodes = lines
        .map((l) => /^(n\d)\s+rpc (\S+)\s+http http:\/\/(\S+)\s+data /.exec(l))
        .filter((m) => m !== null)
        .map((m) => ({ id: m[1] ?? "", rpc: m[2] ?? "", http: m[3] ?? "" }));
      assert.deepEqual(
        nodes.map((n) => n.id),
        ["n1", "n2", "n3"],
        output(),
      );
      // Its data directory as the operator named it: --base-dir given absolute, printed so (a
      // path relative to the working directory read ../../tmp/…, an audit, 2026-12-07).
      assert.ok(
        lines.some((l) => l.startsWith("n1 ") && l.endsWith(` data ${join(dir, "cluster", "n1")}`)),
        output(),
      );
      // Every node's log lines come prefixed with its id.
      for (const n of nodes) assert.ok(lines.some((l) => l.startsWith(`${n.id} | {`)));

      for (const n of nodes) {
        assert.equal((await fetch(`http://${n.http}/health/quick`)).status, 200);
        await eventually(
          `${n.id} sees 3 alive members`,
          async () => {
            const report = (await (await fetch(`http://${n.http}/health`)).json()) as {
              nodes: { id: string; state: string }[];
            };
            return (
              report.nodes.length === 3 &&
              report.nodes.every((m) => m.state === "alive") &&
              report.nodes
                .map((m) => m.id)
                .sort()
                .join() === "n1,n2,n3"
            );
          },
          5_000,
        );
      }
      // The `cairn cluster` command the launcher suggests.
      const first = nodes[0];
      assert.ok(first);
      const view = spawnSync(
        CAIRN,
        ["--endpoints", first.rpc, "cluster", "--output", "json", "--timeout", "3000"],
        { cwd: ROOT, env: cleanEnv(), encoding: "utf8", timeout: 5_000 },
      );
      assert.equal(view.status, 0, view.stderr);
      const members = (JSON.parse(view.stdout) as { nodes: { id: string; state: string }[] }).nodes;
      assert.deepEqual(members.map((m) => `${m.id}:${m.state}`).sort(), [
        "n1:alive",
        "n2:alive",
        "n3:alive",
      ]);

      launcher.kill("SIGTERM");
      assert.equal(await exited, 0, output());
      for (const id of ["n1", "n2", "n3"]) {
        assert.ok(lines.includes(`${id} exited with code 0`), output());
      }
    } finally {
      if (launcher.exitCode === null) {
        launcher.kill("SIGKILL");
        await exited;
        // The nodes run in their own process groups: kill any the launcher left behind.
        for (const id of ["n1", "n2", "n3"]) {
          try {
            process.kill(
              Number(readFileSync(join(dir, "cluster", `${id}.pid`), "utf8")),
              "SIGKILL",
            );
          } catch {
            // Not running (no pid file, or already gone).
          }
        }
      }
    }
  });
});
