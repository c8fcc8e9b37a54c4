/**
 * Addresses as SWIM carries them: `host:port`, where the host is an IPv4 address, an IPv6 address
 * in brackets, or an RFC 1123 host name, and nothing else. A member's `rpcAddr` and `httpAddr`
 * and a ping-req's `targetAddr` come from unauthenticated datagrams and end up in getaddrinfo
 * and the socket: a host with a NUL byte made `dns.lookup` throw inside the UDP handler (the node
 * exited), and any other string was a name handed to the resolver. The codec drops a datagram
 * naming anything else (codec.ts, `bad-field`), and validateMeta refuses to advertise it.
 *
 * Pure (the core's rule): no `node:net`; an IPv6 literal is checked by the WHATWG URL parser.
 */

const OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
const IPV4 = new RegExp(`^${OCTET}(?:\\.${OCTET}){3}$`);
const IPV6_CHARS = /^[0-9A-Fa-f:.]+$/;
/** An IPv6 zone (`fe80::1%eth0`): an interface name or index. */
const ZONE = /^[A-Za-z0-9_.-]{1,64}$/;
const LABEL = /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/;
/**
 * A last label that is a number (`1`, `0x7f`): getaddrinfo reads `0x7f.1` or `2130706433` as an
 * IPv4 address (inet_aton), so such a "name" is an address in disguise (the URL standard's
 * "ends in a number"; RFC 1123 §2.1: the top label is alphabetic).
 */
const NUMERIC_LABEL = /^(?:[0-9]+|0[xX][0-9A-Fa-f]*)$/;

/** A dotted-quad IPv4 address, as node:net's isIPv4 takes it (no leading zeros). */
export function isIPv4Literal(host: string): boolean {
  return IPV4.test(host);
}

/** An IPv6 address (without brackets), with an optional zone of interface-name characters. */
export function isIPv6Literal(host: string): boolean {
  const percent = host.indexOf("%");
  const address = percent < 0 ? host : host.slice(0, percent);
  if (percent >= 0 && !ZONE.test(host.slice(percent + 1))) return false;
  if (!address.includes(":") || !IPV6_CHARS.test(address)) return false;
  try {
    new URL(`http://[${address}]/`);
    return true;
  } catch {
    return false;
  }
}

export function isIpLiteral(host: string): boolean {
  return isIPv4Literal(host) || isIPv6Literal(host);
}

/** An RFC 1123 host name (a trailing dot allowed) whose last label is not a number. */
export function isHostName(host: string): boolean {
  const name = host.endsWith(".") ? host.slice(0, -1) : host;
  if (name.length < 1 || name.length > 253) return false;
  const labels = name.split(".");
  return labels.every((l) => LABEL.test(l)) && !NUMERIC_LABEL.test(labels[labels.length - 1] ?? "");
}

/**
 * Splits `host:port` (IPv6 hosts in brackets); null unless the host is an IP literal or a host
 * name (above) and the port is 1..65535 (or 0 with `allowPortZero`, for a bind address that lets
 * the OS choose).
 */
export function parseHostPort(
  addr: string,
  allowPortZero = false,
): { host: string; port: number } | null {
  const colon = addr.lastIndexOf(":");
  if (colon <= 0) return null;
  let host = addr.slice(0, colon);
  const portText = addr.slice(colon + 1);
  if (!/^[0-9]{1,5}$/.test(portText)) return null;
  const port = Number(portText);
  if (port < (allowPortZero ? 0 : 1) || port > 65535) return null;
  if (host.startsWith("[")) {
    if (!host.endsWith("]")) return null;
    host = host.slice(1, -1);
    return isIPv6Literal(host) ? { host, port } : null;
  }
  return isIPv4Literal(host) || isHostName(host) ? { host, port } : null;
}

/** The "any address" forms a node may bind to but never advertise. */
export function isWildcardHost(host: string): boolean {
  return host === "0.0.0.0" || host === "::" || /^(0{0,4}:){2,7}0{0,4}$/.test(host);
}

/**
 * Whether `addr` may name a member (`rpcAddr`, `httpAddr`) or a probe target in a datagram: what
 * validateMeta lets a member advertise, so an honest peer never sends anything else.
 */
export function isMemberAddress(addr: string): boolean {
  const p = parseHostPort(addr);
  return p !== null && !isWildcardHost(p.host);
}
