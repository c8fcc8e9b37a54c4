/**
 * Golden scenario scripts for the Raft core: one file per scenario under testdata/, named
 * <topic>_<case>.txt. UPDATE_GOLDEN=1 rewrites the expected outputs (review the diff!).
 */
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { runScript } from "../support/datadriven.ts";
import { GoldenEnv } from "./support/golden-env.ts";

const dir = join(import.meta.dirname, "testdata");

describe("raft golden scripts", () => {
  for (const file of readdirSync(dir)
    .filter((f) => f.endsWith(".txt"))
    .sort()) {
    it(file.replace(/\.txt$/, ""), () => {
      const env = new GoldenEnv();
      runScript(join(dir, file), (cmd) => env.exec(cmd));
    });
  }
});
