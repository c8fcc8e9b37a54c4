/**
 * `bin/cairn` ends when its command does: a client command whose node never answers its
 * connection (SYNs dropped) ends at its `--timeout`, not when the kernel gives the connect up.
 */
import assert from "node:assert/strict";
import { type ChildProcessByStdio, spawn } from "node:child_process";
import { once } from "node:events";
import { connect, type Socket } from "node:net";
import type { Readable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { CAIRN, cleanEnv, ROOT } from "../support/server-process.ts";

/**
 * A listener that never accepts: a process that listens with a backlog of one and then blocks
 * its only thread. The kernel completes handshakes into the accept queue until it holds two,
 * then drops every SYN, as a firewall that drops would; no packet leaves loopback.
 */
const HOLE = `
const net = require("node:net");
const server = net.createServer();
server.listen({ port: 0, host: "127.0.0.1", backlog: 1 }, () => {
  process.stdout.write(server.address().port + "\\n", () =>
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0));
});
`;

describe("bin/cairn's exit", () => {
  let hole: ChildProcessByStdio<null, Readable, null>;
  let port = 0;
  const fillers: Socket[] = [];

  before(async () => {
    hole = spawn(process.execPath, ["-e", HOLE], { stdio: ["ignore", "pipe", "inherit"] });
    const [line] = (await once(hole.stdout, "data")) as [Buffer];
    port = Number(line.toString().trim());
    // Fill the accept queue (backlog 1 holds two), so that the next SYN is dropped.
    for (let i = 0; i < 2; i++) {
      const socket = connect(port, "127.0.0.1");
      socket.on("error", () => {});
      await once(socket, "connect");
      fillers.push(socket);
    }
  });

  after(() => {
    for (const s of fillers) s.destroy();
    hole.kill("SIGKILL");
  });

  it("a command whose node never answers its connection ends at its --timeout", async () => {
    const started = performance.now();
    const proc = spawn(
      CAIRN,
      ["--endpoints", `127.0.0.1:${port}`, "--timeout", "500", "get", "k"],
      { cwd: ROOT, env: cleanEnv(), stdio: ["ignore", "pipe", "pipe"] },
    );
    let err = "";
    proc.stderr.on("data", (d: Buffer) => (err += d.toString()));
    // Bounded: before the fix the process stayed until the kernel gave the connect up (two
    // minutes with Linux's six SYN retries); the limit is far from both.
    const limit = setTimeout(() => proc.kill("SIGKILL"), 30_000);
    const [code, signal] = (await once(proc, "exit")) as [number | null, NodeJS.Signals | null];
    clearTimeout(limit);
    const seconds = (performance.now() - started) / 1000;
    assert.equal(signal, null, `still running after ${seconds.toFixed(1)} s: ${err}`);
    assert.equal(code, 3, err);
    // "Deadline exceeded" where the kernel drops the SYN (a host that resets instead, with
    // tcp_abort_on_overflow, fails the connect at once: the exit is then timely anyway).
    assert.match(err, /cairn get: unavailable: /);
  });
});
