/**
 * Who may call what on `rpc_addr` (docs/operations.md, "Security"): a pure core, no I/O. The
 * front end (front-end.ts), in the thread that terminates the connection's TLS, computes each
 * call's Identity from what the connection knows — the client certificate's subject, read once
 * per connection, and the call's `authorization: Bearer` metadata, looked up in the tokens
 * table (common/auth-tokens.ts) and cached per connection — and asks `authorize` before it dispatches
 * anything: a refused call never reaches a handler, in any threading mode.
 *
 * The rules, in the order they are checked:
 *
 * 1. `open` methods (the standard health service) answer anyone: load balancers and probes hold
 *    no credentials.
 * 2. With no authentication configured (no `auth.tokens_file`, no `tls.client_ca_file`), every
 *    client method answers anyone, as before this layer existed: a single node on loopback with
 *    `npm start` and the CLI keeps working.
 * 3. Peer methods (`cairn.v1.Raft/*`) refuse every client identity (a token or a client CA's
 *    certificate): PERMISSION_DENIED. A peer identity passes; so does an anonymous caller, left
 *    to the peers' own checks (the `cairn-peer` metadata, the handshake's cluster id and
 *    membership: src/replication/handshake.ts), which are what cleartext peers have.
 * 4. Client methods need credentials once authentication is configured: none (anonymous) is
 *    UNAUTHENTICATED, and so is a token the table does not hold. `read` may call `read`
 *    methods, `readwrite` also `write` ones, `admin` everything. A peer (a node forwarding its
 *    own clients' calls, or reading the cluster view while it joins) may call `read` and
 *    `write` methods but not `admin` ones.
 *
 * Caveats: the roles are coarse (no per-key or per-prefix grants); a certificate's role is its
 * subject's OU and cannot be revoked short of rotating the client CA; forwarding trusts the
 * forwarding peer to have checked its caller (see forward.ts).
 */
import { status } from "@grpc/grpc-js";
import { altNamesOf } from "../common/alt-names.ts";
import { isRole, type Role } from "../common/auth-tokens.ts";

export type { Role } from "../common/auth-tokens.ts";

/** Who a call comes from, as far as its connection and metadata show. */
export type Identity =
  | { readonly kind: "anonymous"; readonly via: "none" }
  | {
      readonly kind: "client";
      readonly name: string;
      readonly role: Role;
      readonly via: "cert" | "token";
    }
  | { readonly kind: "peer"; readonly name: string; readonly via: "cert" };

export const ANONYMOUS: Identity = { kind: "anonymous", via: "none" };

/** What a method needs (methodClassOf). */
export type MethodClass = "open" | "read" | "write" | "admin" | "peer";

const READ_METHODS = new Set(["/cairn.v1.KV/Get", "/cairn.v1.KV/Scan"]);
const WRITE_METHODS = new Set(["/cairn.v1.KV/Put", "/cairn.v1.KV/Delete"]);

/**
 * The class of the method at `path`. A method this table does not know needs `admin`: a new
 * service is closed until someone decides who may call it.
 */
export function methodClassOf(path: string): MethodClass {
  if (path.startsWith("/grpc.health.v1.Health/")) return "open";
  if (path.startsWith("/cairn.v1.Raft/")) return "peer";
  if (READ_METHODS.has(path)) return "read";
  if (WRITE_METHODS.has(path)) return "write";
  // The cluster view, and the schema (server reflection): what a reader needs to find its way.
  if (path.startsWith("/cairn.v1.Meta/")) return "read";
  if (path.startsWith("/grpc.reflection.")) return "read";
  return "admin";
}

/** A refused call: the gRPC status, Cairn's code, and a reason that names no secret. */
export interface Refusal {
  readonly code: status.UNAUTHENTICATED | status.PERMISSION_DENIED;
  readonly errorCode: "CAIRN_ERR_UNAUTHENTICATED" | "CAIRN_ERR_PERMISSION_DENIED";
  readonly reason: string;
}

function rank(role: Role): number {
  return role === "read" ? 0 : role === "readwrite" ? 1 : 2;
}

function roleNeeded(cls: "read" | "write" | "admin"): Role {
  return cls === "read" ? "read" : cls === "write" ? "readwrite" : "admin";
}

function describe(who: Identity): string {
  switch (who.kind) {
    case "anonymous":
      return "an anonymous caller";
    case "client":
      return `client ${JSON.stringify(who.name)} (role ${who.role}, by ${who.via === "cert" ? "certificate" : "token"})`;
    case "peer":
      return `peer ${JSON.stringify(who.name)}`;
  }
}

/**
 * Whether `who` may call a method of class `cls` at `path`; null when it may. `enforced`: some
 * authentication is configured (rule 2).
 */
export function authorize(
  who: Identity,
  cls: MethodClass,
  path: string,
  enforced: boolean,
): Refusal | null {
  if (cls === "open") return null;
  if (cls === "peer") {
    if (who.kind !== "client") return null;
    return denied(`${path} is for the cluster's nodes only; ${describe(who)} is a client`);
  }
  if (!enforced) return null;
  switch (who.kind) {
    case "anonymous":
      return {
        code: status.UNAUTHENTICATED,
        errorCode: "CAIRN_ERR_UNAUTHENTICATED",
        reason: `${path} needs credentials (a client certificate or an authorization: Bearer token) and the call has none`,
      };
    case "peer":
      return cls === "admin" ? denied(`${path} needs role admin; ${describe(who)} has none`) : null;
    case "client": {
      const need = roleNeeded(cls);
      if (rank(who.role) >= rank(need)) return null;
      return denied(`${path} needs role ${need}; ${describe(who)} may not call it`);
    }
  }
}

function denied(reason: string): Refusal {
  return { code: status.PERMISSION_DENIED, errorCode: "CAIRN_ERR_PERMISSION_DENIED", reason };
}

/** A bearer token the table does not hold (or a malformed header): its value never appears. */
export function badToken(path: string, why: string): Refusal {
  return {
    code: status.UNAUTHENTICATED,
    errorCode: "CAIRN_ERR_UNAUTHENTICATED",
    reason: `${path}: the authorization metadata ${why}`,
  };
}

/** What a client certificate's subject says (the parts of tls' PeerCertificate read here). */
export interface CertSubject {
  readonly CN?: string | string[] | undefined;
  readonly OU?: string | string[] | undefined;
}

function first(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/**
 * The identity of a client certificate the client CA signed: its name is the subject's CN, or
 * else its first subject alternative name's value (a SPIFFE URI, a DNS name; read whole when
 * Node quotes it: common/alt-names.ts), whatever its type; its role the
 * subject's OU when one OU names a role (`cairn cert create-client NAME --role ROLE` writes
 * it), else `readwrite`. The highest role named wins when several OUs name one.
 */
export function certIdentity(subject: CertSubject | undefined, subjectAltName?: string): Identity {
  let name = first(subject?.CN);
  if ((name === undefined || name === "") && subjectAltName !== undefined)
    name = altNamesOf(subjectAltName)[0]?.value;
  const ous = subject?.OU === undefined ? [] : ([] as string[]).concat(subject.OU);
  let role: Role | null = null;
  for (const ou of ous) {
    if (isRole(ou) && (role === null || rank(ou) > rank(role))) role = ou;
  }
  return { kind: "client", name: name ?? "", role: role ?? "readwrite", via: "cert" };
}
