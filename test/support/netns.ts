/**
 * A network namespace of a test's own (`unshare -n`: only a loopback, brought up here), with its
 * own ephemeral port range, and UDP ports held taken in it. The namespace lives as long as its
 * holder process; `spawnCairn`/`startServer`/`runCairn` enter it by that pid (`nsenter`). Only
 * where the tests run as root with util-linux and iproute2 (otherwise `netnsSkip` says why).
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { createInterface } from "node:readline";

function probe(): string | false {
  if (process.getuid?.() !== 0) return "needs root to make a network namespace";
  try {
    execFileSync("unshare", ["-n", "sh", "-c", "ip link set lo up && command -v nsenter"], {
      stdio: "ignore",
    });
    return false;
  } catch {
    return "cannot make a network namespace here (unshare, ip, nsenter)";
  }
}

/** False where a network namespace can be made, else the reason the test is skipped. */
export const netnsSkip: string | false = probe();

export interface NetNs {
  /** The holder's pid: `/proc/<pid>/ns/net` is the namespace. */
  readonly pid: number;
  /** Ends the holder (and so the namespace, once nothing else is in it). */
  close(): Promise<void>;
}

/**
 * The holder binds a UDP socket on each port of argv and says "held", then waits for its
 * standard input to close (the test's end).
 */
const HOLDER = `
const dgram = require("node:dgram");
const ports = process.argv.slice(1).map(Number);
let bound = 0;
const sockets = ports.map((p) => {
  const s = dgram.createSocket("udp4");
  s.bind(p, "127.0.0.1", () => { if (++bound === ports.length) console.log("held"); });
  return s;
});
if (ports.length === 0) console.log("held");
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
`;

/**
 * A new network namespace whose ephemeral ports (what port 0 picks, for TCP and UDP) are
 * `range`, with `udpPorts` taken on 127.0.0.1.
 */
export async function netns(
  range: readonly [number, number],
  udpPorts: readonly number[],
): Promise<NetNs> {
  const script = `ip link set lo up && sysctl -qw net.ipv4.ip_local_port_range="${range[0]} ${range[1]}" && code="$1" && shift && exec "$0" -e "$code" -- "$@"`;
  const holder: ChildProcess = spawn(
    "unshare",
    ["-n", "sh", "-c", script, process.execPath, HOLDER, ...udpPorts.map(String)],
    { stdio: ["pipe", "pipe", "pipe"] },
  );
  let stderr = "";
  holder.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<void>((resolve) => holder.once("exit", () => resolve()));
  await new Promise<void>((resolve, reject) => {
    const rl = createInterface({ input: holder.stdout as NodeJS.ReadableStream });
    rl.on("line", (line) => {
      if (line === "held") resolve();
    });
    void exited.then(() => reject(new Error(`the namespace's holder exited: ${stderr}`)));
  });
  const pid = holder.pid;
  if (pid === undefined) throw new Error("the namespace's holder has no pid");
  return {
    pid,
    close: async () => {
      holder.stdin?.end();
      await exited;
    },
  };
}
