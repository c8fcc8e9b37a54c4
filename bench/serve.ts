/**
 * The benchmarks' single-node server: `cairn serve` on a data directory, on ports the OS picks,
 * resolved once its "node started" log line names the gRPC address.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";

const CAIRN = join(import.meta.dirname, "..", "bin", "cairn");

export async function startCairn(
  dataDir: string,
  extraArgs: readonly string[] = [],
): Promise<{ proc: ChildProcess; rpc: string }> {
  const proc = spawn(
    CAIRN,
    [
      "serve",
      "--data-dir",
      dataDir,
      "--rpc-addr",
      "127.0.0.1:0",
      "--http-addr",
      "127.0.0.1:0",
      ...extraArgs,
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const rl = createInterface({ input: proc.stdout as NodeJS.ReadableStream });
  const rpc = await new Promise<string>((resolve, reject) => {
    rl.on("line", (line) => {
      if (line.includes('"node started"'))
        resolve((JSON.parse(line) as { fields: { rpc_addr: string } }).fields.rpc_addr);
    });
    proc.once("exit", (code) => reject(new Error(`server exited with ${code}`)));
  });
  return { proc, rpc };
}
