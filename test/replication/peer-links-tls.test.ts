/**
 * A node's channels to a peer over TLS (peer-links.ts with src/common/peer-tls.ts) when its
 * certificate files are replaced: every channel, the grpc-js one for snapshots and the node's own
 * for streams and unary calls, dials its next connection with the files read last, without being
 * rebuilt, and a call in flight on the connection before goes on to its end.
 *
 * The peer is a Node HTTP/2 server on loopback that answers every call NOT_FOUND (the call came
 * through: the handshake passed) except `/t.T/Hold`, which it holds open until told. The rotation
 * moves both ends from one CA to another, as an operator replacing a cluster's CA does: after it,
 * a connection made with the old files fails on either side.
 */
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { copyFileSync, mkdtempSync, readFileSync, renameSync, rmSync } from "node:fs";
import {
  createSecureServer,
  type Http2SecureServer,
  type ServerHttp2Session,
  type ServerHttp2Stream,
} from "node:http2";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import type { TLSSocket } from "node:tls";
import { type Client, Metadata, type ServiceError, status } from "@grpc/grpc-js";
import { PeerTls } from "../../src/common/peer-tls.ts";
import { certCommand } from "../support/tls-certs.ts";
import { N2, testLinks } from "./peer-support.ts";
import { deadlineClock } from "../../src/common/deadline-clock.ts";

const dir = mkdtempSync(join(tmpdir(), "cairn-peer-links-tls-"));
after(() => rmSync(dir, { recursive: true, force: true }));

function must(args: readonly string[]): void {
  const r = certCommand(args);
  if (r.code !== 0) throw new Error(`cairn cert ${args.join(" ")}: ${r.err}`);
}

interface Pki {
  readonly ca: string;
  readonly cert: (id: string) => string;
  readonly key: (id: string) => string;
}

/** A CA in `dir`/`name` and certificates for n1 and n2 it signed. */
function pki(name: string): Pki {
  const d = join(dir, name);
  must(["create-ca", "--certs-dir", d]);
  for (const id of ["n1", "n2"]) {
    must(["create-node", id, "--host", "127.0.0.1", "--certs-dir", d]);
    renameSync(join(d, "node.crt"), join(d, `${id}.crt`));
    renameSync(join(d, "node.key"), join(d, `${id}.key`));
  }
  return {
    ca: join(d, "ca.crt"),
    cert: (id) => join(d, `${id}.crt`),
    key: (id) => join(d, `${id}.key`),
  };
}

/** Replaces `to` with a copy of `from` by a rename, as tools that rotate certificates do. */
function replace(from: string, to: string): void {
  copyFileSync(from, `${to}.new`);
  renameSync(`${to}.new`, to);
}

/** n2's side, with `pki`'s certificate and CA (which checks the client's certificate). */
function serverContext(p: Pki): Parameters<Http2SecureServer["setSecureContext"]>[0] {
  return {
    cert: readFileSync(p.cert("n2")),
    key: readFileSync(p.key("n2")),
    ca: readFileSync(p.ca),
  };
}

const GRPC = { ":status": 200, "content-type": "application/grpc" };

/** A unary call on grpc-js's channel: its status code (NOT_FOUND when it reached the server). */
function grpcUnary(client: Client, path: string): Promise<ServiceError | null> {
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      path,
      (b: Buffer) => b,
      (b: Buffer) => b,
      Buffer.alloc(0),
      new Metadata(),
      { deadline: Date.now() + 5_000 },
      (err: ServiceError | null) => resolve(err),
    );
  });
}

async function until(what: string, check: () => boolean | Promise<boolean>): Promise<void> {
  const deadline = performance.now() + 10_000;
  while (!(await check())) {
    if (performance.now() > deadline) assert.fail(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("a node's channels to a peer when its TLS files are replaced", () => {
  it("dial their next connections with the new files, and the call in flight goes on", async () => {
    const before = pki("before");
    const rotated = pki("rotated");
    // n1's files, where its configuration points.
    const files = {
      certFile: join(dir, "n1.crt"),
      keyFile: join(dir, "n1.key"),
      peerCaFile: join(dir, "ca.crt"),
    };
    copyFileSync(before.cert("n1"), files.certFile);
    copyFileSync(before.key("n1"), files.keyFile);
    copyFileSync(before.ca, files.peerCaFile);
    const tls = new PeerTls(files, (err) => assert.fail(err));

    // The client certificate each call's connection presented (its fingerprint), in order.
    const callers: string[] = [];
    const sessions = new Set<ServerHttp2Session>();
    let held: ServerHttp2Stream | null = null;
    const server = createSecureServer({ ...serverContext(before), requestCert: true });
    server.on("session", (s: ServerHttp2Session) => {
      sessions.add(s);
      s.on("close", () => sessions.delete(s));
    });
    server.on("stream", (stream: ServerHttp2Stream, headers) => {
      const cert = (stream.session?.socket as TLSSocket).getPeerCertificate();
      callers.push(cert.fingerprint256);
      if (headers[":path"] === "/t.T/Hold") {
        stream.respond(GRPC, { waitForTrailers: true });
        stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
        held = stream;
        return;
      }
      stream.respond({ ...GRPC, "grpc-status": String(status.NOT_FOUND) }, { endStream: true });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = `127.0.0.1:${(server.address() as AddressInfo).port}`;

    const { links, close } = testLinks({ tls });
    try {
      const peer = links.link(N2);
      const client = links.client(peer, address);
      const channel = links.channel(peer, address);
      assert.equal((await grpcUnary(client, "/t.T/Ping"))?.code, status.NOT_FOUND);
      const own = await channel.unary("/t.T/Ping", Buffer.alloc(0), {
        deadline: deadlineClock() + 5_000,
      });
      assert.equal(own.code, status.NOT_FOUND, own.details);

      // A call in flight on grpc-js's connection across the rotation.
      const hold = client.makeServerStreamRequest(
        "/t.T/Hold",
        (b: Buffer) => b,
        (b: Buffer) => b,
        Buffer.alloc(0),
        new Metadata(),
        {},
      );
      const holdEnd = new Promise<number>((resolve) => {
        hold.on("status", (s: { code: number }) => resolve(s.code));
        hold.on("error", () => undefined);
        hold.resume();
      });
      await until("the server holds the call", () => held !== null);

      // Both ends move to the other CA.
      const contextBefore = tls.dial("n2").secureContext;
      replace(rotated.cert("n1"), files.certFile);
      replace(rotated.key("n1"), files.keyFile);
      replace(rotated.ca, files.peerCaFile);
      server.setSecureContext(serverContext(rotated));
      await until("n1 reloaded its files", () => tls.dial("n2").secureContext !== contextBefore);
      // The server ends its connections gracefully (GOAWAY): their calls in flight go on, the
      // next calls need new connections, made with the files read now.
      for (const s of sessions) s.goaway();
      callers.length = 0;

      const err = await grpcUnary(client, "/t.T/Ping");
      assert.equal(
        err?.code,
        status.NOT_FOUND,
        `grpc-js's channel after the reload: ${err?.details}`,
      );
      const ownAfter = await channel.unary("/t.T/Ping", Buffer.alloc(0), {
        deadline: deadlineClock() + 5_000,
      });
      assert.equal(ownAfter.code, status.NOT_FOUND, ownAfter.details);
      const rotatedN1 = new X509Certificate(readFileSync(rotated.cert("n1"))).fingerprint256;
      assert.deepEqual(callers, [rotatedN1, rotatedN1], "both presented n1's new certificate");
      assert.equal(links.client(peer, address), client, "the same grpc-js channel");
      assert.equal(links.channel(peer, address), channel, "the same own channel");

      // The held call ends as the server ends it, OK: nothing cut it.
      (held as ServerHttp2Stream | null)?.end();
      assert.equal(await holdEnd, status.OK);
    } finally {
      await close();
      tls.close();
      for (const s of sessions) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
