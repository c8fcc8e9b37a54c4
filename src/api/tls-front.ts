/**
 * TLS on the front end (front-end.ts; docs/operations.md, "Security"): the connections of
 * `rpc_addr` whose first byte opens a TLS record are handed to a tls.Server that never listens
 * itself (`emit("connection")`), which does the handshake and gives back a TLSSocket; the front
 * end then serves HTTP/2 on it as on a plain socket. Every thread that serves `rpc_addr` (the
 * main thread, each gRPC I/O thread, each shard worker) accepts its own connections, so each
 * terminates TLS on its own with a context it builds from the files: a TLS session never moves
 * between threads.
 *
 * - ALPN `h2` only and TLS 1.2 or later (OpenSSL picks 1.3 whenever the client offers it).
 * - The handshake must finish within `rpc.handshake_timeout_ms` (tls.Server's handshakeTimeout),
 *   so a client that opens connections and never finishes one holds each that long at most.
 * - With a client CA (`tls.client_ca_file`), a client must present a certificate it signed,
 *   valid now; otherwise its connection is closed once the handshake ends, and reported.
 * - With a peer CA (`tls.peer_ca_file`, a cluster), certificates of either CA are taken: the
 *   peers are each other's clients. Without a client CA a client may present none; one that
 *   presents a certificate neither CA signed is refused all the same. Each verified certificate
 *   gives its connection a TlsIdentity (src/common/peer-tls.ts: which CA, which names), which the
 *   front end checks the peers' calls against and hands on with every call.
 * - A shard worker's peer connection opens with a cleartext CONNECT (worker-tunnel.ts); the
 *   worker that serves it starts TLS on it after its answer (`accept(socket, true)`).
 * - The files are looked at every second (TlsFileWatch); once they change and read well, new
 *   handshakes use them (`setSecureContext`), and connections already open keep theirs.
 */
import { Server as TlsServer, type TLSSocket } from "node:tls";
import type { Socket } from "node:net";
import {
  readTlsFiles,
  stampTlsFiles,
  type TlsFiles,
  TlsFileWatch,
  type TlsMaterial,
} from "../common/tls-files.ts";
import type { FrontEndEvent } from "./handoff.ts";
import {
  type Authorities,
  authoritiesOf,
  identityOf,
  type TlsIdentity,
} from "../common/peer-tls.ts";

/** How long a refused client has to close its connection after the GOAWAY. */
const REFUSAL_GRACE_MS = 1000;

/** The first byte of a TLS handshake record (ContentType handshake). */
export const TLS_HANDSHAKE_BYTE = 0x16;

export interface TlsFront {
  /**
   * Hands over a socket whose first bytes (unshifted back) open a TLS handshake; `tunneled`: it
   * came through a CONNECT to this shard worker (worker-tunnel.ts).
   */
  accept(socket: Socket, tunneled: boolean): void;
  /** Stops the file watch and closes the connections still in their handshake. */
  close(): void;
}

/**
 * What a client refused before its first call gets: the server's preface (an empty SETTINGS)
 * and GOAWAY INADEQUATE_SECURITY (0xc), last stream 0 (no call ran), with `why` as its debug
 * data. Cleartext to a TLS port gets it in cleartext; a refused client certificate, over TLS.
 */
export function goAwayInadequateSecurity(why: string): Buffer {
  const debug = Buffer.from(why, "utf8");
  const goAway = Buffer.alloc(9 + 8 + debug.length);
  goAway.writeUIntBE(8 + debug.length, 0, 3);
  goAway[3] = 0x7; // GOAWAY
  goAway.writeUInt32BE(0, 9); // last stream id
  goAway.writeUInt32BE(0xc, 13); // INADEQUATE_SECURITY
  debug.copy(goAway, 17);
  const settings = Buffer.from([0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
  return Buffer.concat([settings, goAway]);
}

function contextOptions(m: TlsMaterial): {
  cert: Buffer;
  key: Buffer;
  ca?: Buffer[];
  minVersion: "TLSv1.2";
  ALPNProtocols: string[];
} {
  // Either CA: a peer is a client of its peers too.
  const cas = [m.clientCa, m.peerCa].filter((b): b is Buffer => b !== null);
  return {
    cert: m.cert,
    key: m.key,
    ...(cas.length === 0 ? {} : { ca: cas }),
    minVersion: "TLSv1.2",
    ALPNProtocols: ["h2"],
  };
}

/**
 * Terminates TLS for a front end: `onSecure` gets each TLS socket whose handshake succeeded
 * (ALPN h2, and a client certificate the client CA signed when one is configured), with the
 * identity of its certificate (null when it presented none) and whether it came through a
 * tunnel. Throws TlsFileError when the files do not read well.
 */
export function tlsFront(
  files: TlsFiles,
  handshakeTimeoutMs: number,
  onSecure: (socket: TLSSocket, identity: TlsIdentity | null, tunneled: boolean) => void,
  report: (event: FrontEndEvent) => void,
): TlsFront {
  const readAt = stampTlsFiles(files);
  const material = readTlsFiles(files);
  const mutual = material.clientCa !== null;
  let authorities: Authorities = authoritiesOf(material);
  const server = new TlsServer({
    ...contextOptions(material),
    // The client's certificate is checked below, so that a refusal can be reported.
    requestCert: mutual || material.peerCa !== null,
    rejectUnauthorized: false,
    handshakeTimeout: handshakeTimeoutMs,
  });
  /** Sockets handed over whose handshake has not ended, and whether each came through a tunnel. */
  const handshaking = new Map<Socket, boolean>();
  let closed = false;

  server.on("secureConnection", (socket: TLSSocket) => {
    // The TLSSocket keeps the socket it wraps as `_parent`.
    const raw = (socket as unknown as { _parent?: Socket | null })._parent;
    let tunneled = false;
    if (raw !== undefined && raw !== null) {
      tunneled = handshaking.get(raw) === true;
      handshaking.delete(raw);
    }
    if (closed) {
      socket.destroy();
      return;
    }
    const cert = socket.getPeerCertificate();
    const presented = cert !== null && Object.keys(cert).length > 0;
    if ((mutual || presented) && !socket.authorized) {
      const peer = `${socket.remoteAddress ?? "unknown"}:${socket.remotePort ?? 0}`;
      const reason = !presented
        ? "it presented no certificate"
        : `its certificate (${cert.subject?.CN ?? "no CN"}) is refused: ${String(socket.authorizationError)}`;
      report({
        code: "CAIRN_ERR_TLS_CLIENT_REFUSED",
        peer,
        message: mutual
          ? `tls.client_ca_file asks for a client certificate: ${reason}`
          : `a certificate the node's CAs did not sign is refused: ${reason}`,
      });
      // The client learns why in HTTP/2's own words (grpc-js: PERMISSION_DENIED), not from a
      // connection that merely closed; one that does not close is cut soon after.
      socket.end(goAwayInadequateSecurity(`client certificate refused: ${reason}`));
      setTimeout(() => socket.destroy(), REFUSAL_GRACE_MS).unref();
      return;
    }
    if (socket.alpnProtocol !== "h2") {
      // A client that offered no ALPN (one offering others without h2 was refused by OpenSSL).
      socket.destroy();
      return;
    }
    onSecure(socket, presented ? identityOf(socket, authorities) : null, tunneled);
  });
  // A handshake that failed or timed out: its socket is destroyed; not reported, as a flood of
  // them would flood the log too.
  server.on("tlsClientError", (_err: Error, socket: TLSSocket) => socket.destroy());

  const watch = new TlsFileWatch(
    files,
    readAt,
    (m) => {
      server.setSecureContext(contextOptions(m));
      authorities = authoritiesOf(m);
      report({
        code: "CAIRN_TLS_RELOADED",
        peer: "",
        message: `new TLS handshakes use the files read now (certificate valid until ${m.notAfter.toISOString()})`,
      });
    },
    (err) =>
      report({
        code: "CAIRN_ERR_TLS_RELOAD",
        peer: "",
        message: `the TLS files changed but cannot be used, the ones read before are kept: ${err.message}`,
      }),
  );

  return {
    accept(socket: Socket, tunneled: boolean): void {
      if (closed) {
        socket.destroy();
        return;
      }
      handshaking.set(socket, tunneled);
      socket.once("close", () => handshaking.delete(socket));
      server.emit("connection", socket);
    },
    close(): void {
      closed = true;
      watch.close();
      for (const s of handshaking.keys()) s.destroy();
      handshaking.clear();
    },
  };
}
