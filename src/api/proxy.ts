/**
 * HTTP CONNECT proxies for the node's own gRPC client (grpc-channel.ts), configured from the
 * environment exactly as grpc-js reads it, so that a deployment (or the chaos harness, whose
 * fault-injecting network is such a proxy) routes the peers' calls the same whichever client
 * makes them:
 *
 * - the proxy is `grpc_proxy`, else `https_proxy`, else `http_proxy`: an `http://` URL (another
 *   scheme, or one that does not parse, means no proxy), port 80 when none is given, and its
 *   user info sent as `Proxy-Authorization: Basic`;
 * - `no_grpc_proxy`, else `no_proxy`: a comma-separated list of IPv4 CIDR ranges and host
 *   suffixes whose targets are reached directly.
 *
 * A tunnel is a Duplex standing in for the socket: it sends `CONNECT host:port`, holds what is
 * written to it until the proxy answers 200, then relays bytes both ways (the bytes of the
 * answer past its header are the tunnel's first). Any other answer destroys it with an error
 * naming the status line: the connection fails before it is ready, and nothing of a call was
 * sent.
 */
import { isIPv4, connect } from "node:net";
import { Duplex } from "node:stream";

export interface Proxy {
  readonly host: string;
  readonly port: number;
  /** `user:password` for Proxy-Authorization, or null. */
  readonly credentials: string | null;
}

type Env = Readonly<Record<string, string | undefined>>;

/** The proxy that calls to `host` go through, or null to connect directly. */
export function proxyFor(host: string, env: Env = process.env): Proxy | null {
  const raw = env["grpc_proxy"] || env["https_proxy"] || env["http_proxy"];
  if (raw === undefined || raw === "") return null;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return null;
  }
  if (url.protocol !== "http:") return null;
  if (bypassed(host, env["no_grpc_proxy"] || env["no_proxy"] || "")) return null;
  let credentials: string | null = null;
  if (url.username !== "") {
    credentials =
      url.password === "" ? url.username : decodeURIComponent(`${url.username}:${url.password}`);
  }
  return {
    host: url.hostname.replace(/^\[(.*)\]$/, "$1"),
    port: url.port === "" ? 80 : Number(url.port),
    credentials,
  };
}

function bypassed(host: string, list: string): boolean {
  for (const entry of list.split(",")) {
    if (entry === "") continue;
    const range = cidr(entry);
    if (range !== null && isIPv4(host)) {
      if ((ipv4(host) & range.mask) === (range.ip & range.mask)) return true;
    } else if (host.endsWith(entry)) {
      return true;
    }
  }
  return false;
}

function cidr(entry: string): { ip: number; mask: number } | null {
  const [ip, bits, ...rest] = entry.split("/");
  // Digits only: Number() reads "" (a trailing slash) as 0, which bypassed the proxy for all.
  if (bits === undefined || !/^\d{1,2}$/.test(bits)) return null;
  const prefix = Number(bits);
  if (rest.length > 0 || ip === undefined || !isIPv4(ip)) return null;
  if (prefix < 0 || prefix > 32) return null;
  return { ip: ipv4(ip), mask: prefix === 0 ? 0 : -1 << (32 - prefix) };
}

function ipv4(ip: string): number {
  return ip.split(".").reduce((acc, octet) => (acc << 8) | Number(octet), 0);
}

/** The longest proxy answer header read before the tunnel is given up. */
const MAX_ANSWER_BYTES = 16 * 1024;

/** A connection to `target` ("host:port") through `proxy` (see the module doc). */
export function tunnel(proxy: Proxy, target: string): Duplex {
  const raw = connect({ host: proxy.host, port: proxy.port, noDelay: true, keepAlive: true });
  let established = false;
  let held: [Buffer, (err?: Error | null) => void][] = [];
  let answer = Buffer.alloc(0);
  const duplex = new Duplex({
    write(chunk: Buffer, _encoding, callback) {
      if (established) raw.write(chunk, callback);
      else held.push([chunk, callback]);
    },
    read() {
      raw.resume();
    },
    final(callback) {
      raw.end();
      callback();
    },
    destroy(err, callback) {
      raw.destroy();
      callback(err);
    },
  });
  const auth =
    proxy.credentials === null
      ? ""
      : `Proxy-Authorization: Basic ${Buffer.from(proxy.credentials).toString("base64")}\r\n`;
  raw.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n${auth}\r\n`);
  raw.on("data", (chunk: Buffer) => {
    if (established) {
      if (!duplex.push(chunk)) raw.pause();
      return;
    }
    answer = Buffer.concat([answer, chunk]);
    const end = answer.indexOf("\r\n\r\n");
    if (end < 0) {
      if (answer.length > MAX_ANSWER_BYTES)
        duplex.destroy(new Error("the proxy's answer is too long"));
      return;
    }
    const line = answer.subarray(0, answer.indexOf("\r\n")).toString("latin1");
    if (!/^HTTP\/1\.[01] 200(?: |$)/.test(line)) {
      duplex.destroy(
        new Error(`the proxy ${proxy.host}:${proxy.port} refused CONNECT ${target}: ${line}`),
      );
      return;
    }
    established = true;
    const rest = answer.subarray(end + 4);
    if (rest.length > 0) duplex.push(rest);
    for (const [bytes, callback] of held) raw.write(bytes, callback);
    held = [];
  });
  raw.on("end", () => duplex.push(null));
  raw.on("error", (err) => duplex.destroy(err));
  raw.on("close", () => duplex.destroy());
  return duplex;
}
