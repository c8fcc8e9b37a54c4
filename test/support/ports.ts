/**
 * Ports for the test processes' nodes: free for TCP and UDP, below Linux's ephemeral range, and
 * claimed across the test files `npm test` runs at once (cluster-process.ts, server-process.ts).
 */
import { createSocket } from "node:dgram";
import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * A port free for both TCP (gRPC, HTTP) and UDP (SWIM shares the RPC port) on `host` right now
 * ("0.0.0.0": on every interface, e.g. for nodes on 127.0.0.1..3).
 *
 * Chosen at random below Linux's ephemeral range (32768–60999), not by binding port 0: a port
 * from that range, free when probed, can be handed to any process's next outgoing connection
 * before the node binds it (a CI run failed so, "address 127.0.0.1:40517 is already in use").
 * Below the range only another test picking the same port can take it, and that is ruled out
 * too: in this process by `handedOut`, across the test files `npm test` runs at once by a claim
 * file per port (`claimPort`).
 */
export async function freePort(host = "127.0.0.1"): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = PORT_LOW + Math.floor(Math.random() * (PORT_HIGH - PORT_LOW));
    if (handedOut.has(port) || !claimPort(port)) continue;
    handedOut.add(port);
    if ((await bindsTcp(port, host)) && (await bindsUdp(port, host))) return port;
  }
  throw new Error(`no port in [${PORT_LOW}, ${PORT_HIGH}) free for both TCP and UDP`);
}

/**
 * Every port this process has handed out: a cluster's ports are all picked before any is bound,
 * and a second pick of one (~0.3% for a chaos cluster's nine) failed a CI run's listen.
 */
const handedOut = new Set<number>();

const PORT_LOW = 20_000;
const PORT_HIGH = 32_768;

/**
 * Where test processes claim ports: a file per port, made with O_EXCL, holding the claimer's
 * pid, removed when the claimer exits. `npm test` runs two test files at once (package.json's
 * `--test-concurrency`), each in its own process, and a cluster's ports are all picked before
 * any is bound: without a claim, the other file could pick and bind one in between.
 */
const CLAIMS = join(tmpdir(), "cairn-test-ports");
/** A claim this old whose process is gone was left by a killed run: it no longer holds. */
const STALE_CLAIM_MS = 60 * 60 * 1000;
const claimed: string[] = [];
let claiming = false;

/** The file that claims `port` while a test process holds it. */
export function claimFile(port: number): string {
  return join(CLAIMS, String(port));
}

/** Claims `port` for this process; false when another live (or recent) claim holds it. */
export function claimPort(port: number): boolean {
  const path = claimFile(port);
  if (!claiming) {
    claiming = true;
    mkdirSync(CLAIMS, { recursive: true });
    process.once("exit", () => {
      for (const p of claimed) rmSync(p, { force: true });
    });
  }
  try {
    writeFileSync(path, String(process.pid), { flag: "wx" });
    claimed.push(path);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    if (staleClaim(path)) rmSync(path, { force: true }); // free for a later pick, not taken now
    return false;
  }
}

function staleClaim(path: string): boolean {
  try {
    if (Date.now() - statSync(path).mtimeMs < STALE_CLAIM_MS) return false;
    process.kill(Number(readFileSync(path, "utf8")), 0);
    return false; // its process still runs
  } catch {
    return true;
  }
}

function bindsTcp(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once("error", () => resolve(false));
    srv.listen(port, host, () => srv.close(() => resolve(true)));
  });
}

function bindsUdp(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const udp = createSocket("udp4");
    udp.once("error", () => {
      udp.close();
      resolve(false);
    });
    udp.bind(port, host, () => udp.close(() => resolve(true)));
  });
}
