/**
 * Runs `cairn serve` where it must refuse to start, and gathers what an operator sees: the exit
 * code, stderr and the JSON log lines (the "node failed to start" record's fields). No sleeps:
 * it waits for the process to exit, within a deadline.
 */
import { cleanEnv, spawnCairn } from "./server-process.ts";

export interface FailedStart {
  readonly code: number | null;
  readonly stderr: string;
  readonly lines: string[];
  /** The `code` field of the "node failed to start" log record, if any. */
  readonly errorCode: string | undefined;
}

export async function startExpectingExit(opts: {
  readonly dataDir: string;
  readonly args?: readonly string[];
  readonly env?: Readonly<Record<string, string>>;
  readonly timeoutMs?: number;
}): Promise<FailedStart> {
  const proc = spawnCairn(
    [
      "serve",
      "--data-dir",
      opts.dataDir,
      "--rpc-addr",
      "127.0.0.1:0",
      "--http-addr",
      "127.0.0.1:0",
      "--node-id",
      "n1",
      ...(opts.args ?? []),
    ],
    cleanEnv(opts.env),
  );
  let stdout = "";
  let stderr = "";
  let started = false;
  proc.stdout?.on("data", (d: Buffer) => {
    stdout += d.toString();
    // It started although it had to refuse: no point waiting for the deadline.
    if (!started && stdout.includes('"message":"node started"')) {
      started = true;
      proc.kill("SIGKILL");
    }
  });
  proc.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  const code = await new Promise<number | null>((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill("SIGKILL");
      reject(
        new Error(`cairn serve did not exit within ${opts.timeoutMs ?? 30_000} ms: ${stdout}`),
      );
    }, opts.timeoutMs ?? 30_000);
    proc.once("close", (c) => {
      clearTimeout(timer);
      if (started) reject(new Error(`cairn serve started where it had to refuse:\n${stdout}`));
      else resolve(c);
    });
  });
  const lines = stdout.split("\n").filter((l) => l.length > 0);
  let errorCode: string | undefined;
  for (const line of lines) {
    try {
      const rec = JSON.parse(line) as { message?: string; fields?: { code?: string } };
      if (rec.message === "node failed to start") errorCode = rec.fields?.code;
    } catch {
      // not a log record
    }
  }
  return { code, stderr, lines, errorCode };
}
