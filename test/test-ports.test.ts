/**
 * `npm test` runs two test files at once, each in its own process, and end-to-end tests pick
 * their nodes' ports before binding them (`freePort`). A port one file picked must not be picked
 * by the other before it is bound: the claim files of `claimPort` rule that out across processes.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { claimFile, claimPort } from "./support/cluster-process.ts";

const helper = join(import.meta.dirname, "support", "cluster-process.ts");

/** A port outside freePort's range that no claim (not even one a killed run left) holds. */
function unclaimedPort(): number {
  for (let i = 0; i < 1000; i++) {
    const port = 19_000 + ((process.pid + i) % 1000);
    if (!existsSync(claimFile(port))) return port;
  }
  throw new Error("every port in [19000, 20000) has a claim file");
}

describe("port claims across test processes", () => {
  it("a port another live process claimed is refused here until that process exits", async () => {
    const PORT = unclaimedPort();
    // The child claims the port, says so, and waits for its stdin to close before exiting.
    const child = spawn(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `const { claimPort } = await import(${JSON.stringify(helper)});
         console.log(claimPort(${PORT}) ? "claimed" : "refused");
         process.stdin.resume();
         process.stdin.on("end", () => process.exit(0));`,
      ],
      { stdio: ["pipe", "pipe", "inherit"] },
    );
    const exited = once(child, "exit");
    try {
      const said = await Promise.race([
        once(child.stdout, "data").then(([chunk]) => String(chunk).trim()),
        exited.then(([code]) => `exited with ${String(code)} before saying anything`),
      ]);
      assert.equal(said, "claimed");
      assert.equal(claimPort(PORT), false, "claimed by the child, refused here");
      assert.ok(existsSync(claimFile(PORT)));
      child.stdin.end();
      await exited;
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL");
    }
    assert.equal(existsSync(claimFile(PORT)), false);
    assert.equal(claimPort(PORT), true, "free once the child exited");
    assert.equal(claimPort(PORT), false, "this process holds it now");
  });
});
