/**
 * The front end's gate (front-end.ts): one per front end (so one per thread that serves
 * `rpc_addr`), present only when authentication is configured (`auth.tokens_file`, or
 * `tls.client_ca_file`). It learns each connection's certificate identity once, when the
 * connection is served (from the TLSSocket, in the thread that terminated its TLS), and checks
 * each call before it is dispatched (authz.ts has the rules). A call's `authorization` value is
 * looked up in the tokens table once per connection and value: a client that sends the same
 * token on every call pays one SHA-256 per connection, and a table reloaded meanwhile is asked
 * again.
 */
import type { Socket } from "node:net";
import { TLSSocket } from "node:tls";
import {
  readTokensFile,
  stampTokensFile,
  type TokenTable,
  TokensFileWatch,
} from "../common/auth-tokens.ts";
import {
  ANONYMOUS,
  authorize,
  badToken,
  certIdentity,
  type Identity,
  type MethodClass,
  type Refusal,
} from "./authz.ts";
import type { TlsIdentity } from "../common/peer-tls.ts";
import type { AuthSetup, FrontEndEvent } from "./handoff.ts";

/** What a connection's calls are checked with. */
interface ConnectionAuth {
  /** Its certificate's identity, or ANONYMOUS. */
  readonly cert: Identity;
  /** The last `authorization` value seen and what it meant under `table`. */
  header: string | null;
  table: TokenTable | null;
  result: Identity | string;
}

export class CallGate {
  #tokens: TokenTable | null;
  readonly #watch: TokensFileWatch | null;
  readonly #byConnection = new WeakMap<object, ConnectionAuth>();
  readonly #clientCerts: boolean;

  /** Throws TokensFileError when the tokens file does not read well. */
  constructor(setup: AuthSetup, report: (event: FrontEndEvent) => void) {
    this.#clientCerts = setup.clientCerts;
    const file = setup.tokensFile;
    if (file === undefined) {
      this.#tokens = null;
      this.#watch = null;
      return;
    }
    const readAt = stampTokensFile(file);
    this.#tokens = readTokensFile(file);
    this.#watch = new TokensFileWatch(
      file,
      readAt,
      (table) => {
        this.#tokens = table;
        report({
          code: "CAIRN_AUTH_RELOADED",
          peer: "",
          message: `auth.tokens_file changed and was reloaded: ${table.size} tokens`,
        });
      },
      (err) =>
        report({
          code: "CAIRN_ERR_AUTH_RELOAD",
          peer: "",
          message: `auth.tokens_file changed but cannot be used, the tokens read before are kept: ${err.reason}`,
        }),
    );
  }

  /**
   * A connection starts being served on `socket` (a TLSSocket when it came over TLS); `tls` is
   * what its verified certificate says (tls-front.ts, peer-tls.ts), null without one. A
   * certificate of the client CA is a client (its role from its OU); one of the peer CA only is a
   * peer, named by its first name. Peer methods under peer TLS on a connection with a
   * certificate are not asked here: front-end.ts checks it names the node the call says it
   * comes from. On one without, they are, so that a token is refused as a client's.
   */
  connected(connection: object, socket: Socket, tls: TlsIdentity | null = null): void {
    let cert: Identity = ANONYMOUS;
    const peerCert = tls?.authorities.includes("peer") === true;
    const clientCert = tls === null ? this.#clientCerts : tls.authorities.includes("client");
    // tls-front.ts closed every connection whose certificate neither CA signed.
    if (clientCert && socket instanceof TLSSocket && socket.authorized) {
      const peer = socket.getPeerCertificate();
      if (peer !== null && Object.keys(peer).length > 0) {
        cert = certIdentity(peer.subject, peer.subjectaltname);
      }
    } else if (peerCert && tls !== null) {
      cert = { kind: "peer", name: tls.names[0] ?? "", via: "cert" };
    }
    this.#byConnection.set(connection, { cert, header: null, table: null, result: cert });
  }

  /** Why a call of `path` (class `cls`) on `connection` is refused, or null when it may run. */
  check(
    connection: object,
    path: string,
    cls: MethodClass,
    authorization: string | undefined,
  ): Refusal | null {
    if (cls === "open") return null;
    const state = this.#byConnection.get(connection);
    let who: Identity = state?.cert ?? ANONYMOUS;
    const tokens = this.#tokens;
    // Without a tokens file the header means nothing here (a proxy may add one).
    if (authorization !== undefined && tokens !== null) {
      let result: Identity | string;
      if (state !== undefined && state.header === authorization && state.table === tokens) {
        result = state.result;
      } else {
        result = tokens.lookup(authorization);
        if (state !== undefined) {
          state.header = authorization;
          state.table = tokens;
          state.result = result;
        }
      }
      if (typeof result === "string") return badToken(path, result);
      who = result;
    }
    return authorize(who, cls, path, true);
  }

  close(): void {
    this.#watch?.close();
  }
}
