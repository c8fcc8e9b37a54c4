/**
 * `<host>:<port>` addresses, as written in the configuration and used by the servers.
 *
 * The host is an IPv4 address, an IPv6 address in brackets (`[::1]:7447`), or a DNS name. The
 * brackets are required for IPv6 so the port is never ambiguous: `::1:7447` is refused with a hint.
 * An empty host (`:7447`) is refused too: binding every interface must be written out
 * (`0.0.0.0:7447` or `[::]:7447`), never implied.
 */
import { isIP, isIPv4, isIPv6 } from "node:net";

export interface HostPort {
  /** Without brackets: `::1`, `127.0.0.1`, `db-1.example`. */
  readonly host: string;
  readonly port: number;
}

export type AddressParseResult =
  { readonly ok: true; readonly value: HostPort } | { readonly ok: false; readonly reason: string };

export interface AddressRules {
  /** Accept port 0 ("pick a free port"): bind addresses only. Default false. */
  readonly allowPortZero?: boolean;
  /** Accept the unspecified address (0.0.0.0, ::): bind addresses only. Default true. */
  readonly allowUnspecified?: boolean;
}

const HOSTNAME =
  /^(?=.{1,253}\.?$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/;

/** Parses `host:port`; never throws. `reason` completes "must be <reason>"-style messages. */
export function parseHostPort(text: string, rules: AddressRules = {}): AddressParseResult {
  const fail = (reason: string): AddressParseResult => ({ ok: false, reason });
  let host: string;
  let portText: string;
  if (text.startsWith("[")) {
    const close = text.indexOf("]");
    if (close < 0 || text[close + 1] !== ":") {
      return fail("an address <host>:<port>; IPv6 hosts are written [addr]:port");
    }
    host = text.slice(1, close);
    portText = text.slice(close + 2);
    if (!isIPv6(host)) return fail(`an address <host>:<port>; "${host}" is not an IPv6 address`);
  } else {
    const colon = text.lastIndexOf(":");
    if (colon < 0) return fail("an address <host>:<port>; the port is missing");
    host = text.slice(0, colon);
    portText = text.slice(colon + 1);
    if (host.includes(":")) {
      return fail("an address <host>:<port>; write IPv6 hosts in brackets, as [::1]:7447");
    }
    if (host === "") {
      return fail("an address <host>:<port>; the host is missing (use 0.0.0.0 to bind all)");
    }
    if (!isIPv4(host) && (!HOSTNAME.test(host) || /^[0-9.]+$/.test(host))) {
      return fail(`an address <host>:<port>; "${host}" is not an IPv4 address or a host name`);
    }
  }
  if (!/^[0-9]{1,5}$/.test(portText)) {
    return fail(`an address <host>:<port>; the port "${portText}" is not a number`);
  }
  const port = Number(portText);
  const minPort = rules.allowPortZero === true ? 0 : 1;
  if (port < minPort || port > 65535) {
    return fail(`an address <host>:<port> with a port between ${minPort} and 65535`);
  }
  if (rules.allowUnspecified === false && isUnspecifiedHost(host)) {
    return fail(`a reachable address, not the unspecified address ${host}`);
  }
  return { ok: true, value: { host, port } };
}

/** `host:port`, with brackets around an IPv6 host. */
export function formatHostPort(address: HostPort): string {
  return isIPv6(address.host)
    ? `[${address.host}]:${address.port}`
    : `${address.host}:${address.port}`;
}

/** True for 0.0.0.0 and :: (any spelling): a bind-all address nobody can connect to. */
export function isUnspecifiedHost(host: string): boolean {
  if (isIP(host) === 4) return host.split(".").every((part) => Number(part) === 0);
  // `::`, and the v4-mapped 0.0.0.0 (`::ffff:0.0.0.0`, canonically 0.0.0.0), which a dual-stack
  // socket binds as every IPv4 address: advertised, it would reach no one.
  if (isIP(host) === 6) {
    const address = canonicalHost(host).split("%")[0]; // a zone (`%eth0`) is no part of it
    return address === "::" || address === "0.0.0.0";
  }
  return false;
}

/** An IPv4-mapped IPv6 address as the WHATWG URL parser writes it: `::ffff:7f00:1`. */
const V4_MAPPED = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/;

/**
 * `host` in one spelling: lower case, an IPv6 address in its canonical (compressed) form, as the
 * WHATWG URL parser writes it, and an IPv4-mapped one (`::ffff:127.0.0.1`, `::ffff:7f00:1`) as
 * the IPv4 address it is: a dual-stack socket bound to it takes that address's port, and what
 * is sent to it goes there. The parser takes no zone (`fe80::1%eth0`, which isIP accepts): it
 * threw on one, so the zone is kept aside.
 */
export function canonicalHost(host: string): string {
  const h = host.toLowerCase();
  if (isIP(h) === 6) {
    const zone = h.indexOf("%");
    const address = zone < 0 ? h : h.slice(0, zone);
    const canonical = new URL(`http://[${address}]/`).hostname.slice(1, -1);
    const mapped = V4_MAPPED.exec(canonical);
    if (mapped !== null && zone < 0) {
      const word = (hex: string | undefined): number => parseInt(hex ?? "0", 16);
      const [high, low] = [word(mapped[1]), word(mapped[2])];
      return `${high >> 8}.${high & 0xff}.${low >> 8}.${low & 0xff}`;
    }
    return canonical + (zone < 0 ? "" : h.slice(zone));
  }
  return h;
}

/**
 * Whether `host` (brackets around an IPv6 address allowed) is a loopback address, where what is
 * sent never leaves the host: 127.0.0.0/8 (its IPv4-mapped spelling too), `::1`, `localhost`.
 */
export function isLoopbackHost(host: string): boolean {
  const h = canonicalHost(host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host);
  return h === "localhost" || h === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/**
 * Whether two hosts as written name the same address: equal ignoring case, equal IP addresses
 * however written (`::1`, `0:0:0:0:0:0:0:1`; an IPv4-mapped `::ffff:127.0.0.1` and 127.0.0.1,
 * which a dual-stack socket binds as one), or `localhost` and a loopback address it names
 * (127.0.0.1, ::1). Other names are not resolved here. (`localhost:8080` beside
 * `127.0.0.1:8080` passed the configuration's same-port check, and the start then blamed
 * another process for the port.)
 */
export function sameHost(a: string, b: string): boolean {
  const x = canonicalHost(a);
  const y = canonicalHost(b);
  if (x === y) return true;
  const loopback = (h: string): boolean => h === "127.0.0.1" || h === "::1";
  return (x === "localhost" && loopback(y)) || (y === "localhost" && loopback(x));
}

/**
 * Whether two `host:port` addresses as written name the same address: the same port and hosts
 * sameHost takes for one, blanks around either ignored. One that does not parse is the same as
 * itself only, as written.
 */
export function sameAddress(a: string, b: string): boolean {
  const x = a.trim();
  const y = b.trim();
  if (x === y) return true;
  const p = parseHostPort(x, { allowPortZero: true });
  const q = parseHostPort(y, { allowPortZero: true });
  return p.ok && q.ok && p.value.port === q.value.port && sameHost(p.value.host, q.value.host);
}
