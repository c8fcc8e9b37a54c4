/**
 * What a certificate names and which of a node's CAs signed it (src/common/peer-tls.ts), on
 * real TLS connections over loopback with certificates made by `cairn cert`: the identity a
 * server records of its client, and the dialing side's check of the node id it dials.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  connect,
  type ConnectionOptions,
  createServer,
  type PeerCertificate,
  type Server,
  type TLSSocket,
} from "node:tls";
import type { AddressInfo } from "node:net";
import { X509Certificate } from "node:crypto";
import {
  authoritiesOf,
  certificateNames,
  checkPeerName,
  identityOf,
  PeerTls,
  peerIdentityRefusal,
  type TlsIdentity,
} from "../../src/common/peer-tls.ts";
import { readTlsFiles } from "../../src/common/tls-files.ts";
import { certCommand, sanOnlyCert, sanOnlyClientCert } from "../support/tls-certs.ts";

const dir = mkdtempSync(join(tmpdir(), "cairn-peer-tls-"));
const peers = join(dir, "peers");
const clients = join(dir, "clients");
const node = { cert: join(peers, "n1.crt"), key: join(peers, "n1.key") };
const alice = { cert: join(clients, "client.alice.crt"), key: join(clients, "client.alice.key") };

function must(args: readonly string[]): void {
  const r = certCommand(args);
  if (r.code !== 0) throw new Error(`cairn cert ${args.join(" ")}: ${r.err}`);
}

let server: Server;
let port = 0;
/** The identity the server recorded of each connection, in order. */
const seen: (TlsIdentity | null)[] = [];

before(async () => {
  must(["create-ca", "--certs-dir", peers]);
  must(["create-node", "n1", "--host", "127.0.0.1", "--certs-dir", peers]);
  renameSync(join(peers, "node.crt"), node.cert);
  renameSync(join(peers, "node.key"), node.key);
  must(["create-ca", "--certs-dir", clients]);
  must(["create-client", "alice", "--certs-dir", clients]);
  const material = readTlsFiles({
    certFile: node.cert,
    keyFile: node.key,
    clientCaFile: join(clients, "ca.crt"),
    peerCaFile: join(peers, "ca.crt"),
  });
  const cas = authoritiesOf(material);
  server = createServer({
    cert: material.cert,
    key: material.key,
    ca: [material.clientCa as Buffer, material.peerCa as Buffer],
    requestCert: true,
    rejectUnauthorized: false,
  });
  server.on("secureConnection", (socket: TLSSocket) => {
    seen.push(socket.authorized ? identityOf(socket, cas) : null);
    socket.end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as AddressInfo).port;
});
after(() => {
  server.close();
  rmSync(dir, { recursive: true, force: true });
});

/**
 * Connects with `options`: null once the server has taken the connection (and ended it: it
 * records its identity first), or the error that ended it.
 */
function handshake(options: ConnectionOptions): Promise<Error | null> {
  return new Promise((resolve) => {
    const socket = connect({ host: "127.0.0.1", port, ...options });
    socket.once("error", (err) => resolve(err));
    socket.once("end", () => {
      socket.destroy();
      resolve(null);
    });
    socket.resume();
  });
}

describe("peer TLS", () => {
  it("records which CA signed a client's certificate, and its names", async () => {
    const ca = readFileSync(join(peers, "ca.crt"));
    assert.equal(
      await handshake({
        ca,
        cert: readFileSync(alice.cert),
        key: readFileSync(alice.key),
        checkServerIdentity: () => undefined,
      }),
      null,
    );
    assert.equal(
      await handshake({
        ca,
        cert: readFileSync(node.cert),
        key: readFileSync(node.key),
        checkServerIdentity: () => undefined,
      }),
      null,
    );
    // The server records after the client's handshake: poll, bounded.
    for (let i = 0; i < 100 && seen.length < 2; i++) await new Promise((r) => setTimeout(r, 10));
    const [client, peer] = seen;
    assert.deepEqual(client, { authorities: ["client"], names: ["alice"] });
    assert.deepEqual(peer, { authorities: ["peer"], names: ["n1", "127.0.0.1"] });
    assert.equal(peerIdentityRefusal(peer ?? null, "n1"), null);
    assert.match(
      peerIdentityRefusal(peer ?? null, "n2") ?? "",
      /names \["n1","127.0.0.1"\], not node "n2"/,
    );
    assert.match(
      peerIdentityRefusal(client ?? null, "alice") ?? "",
      /not signed by this node's tls.peer_ca_file/,
    );
    assert.match(peerIdentityRefusal(null, "n1") ?? "", /presented no certificate/);
  });

  it("names a certificate with an empty subject by its alternative names, without throwing", () => {
    // node:crypto gives such a certificate's subject as undefined; any CA may sign one.
    const svc = sanOnlyClientCert(
      { dir: peers, ca: join(peers, "ca.crt") },
      join(dir, "san"),
      "spiffe://c/s",
    );
    const cert = new X509Certificate(readFileSync(svc.cert));
    assert.deepEqual(certificateNames(cert), []);
    const check = checkPeerName("n1")("localhost", { raw: cert.raw } as PeerCertificate);
    assert.match(String(check), /names \[\], not node "n1" that was dialed/);
  });

  it("reads a name node:tls quotes whole, and takes no other type of name nor a made-up one", () => {
    // node:tls writes a value holding a comma, a quote, an apostrophe, a backslash or a control
    // character as a JSON string (`DNS:"n1\u002cn2"`, its commas escaped): split on ", " and cut
    // at its colon, such a name was read with its quotes and escapes: a name the certificate
    // does not hold, in place of one it does.
    const hostile = 'x", DNS:n4, DNS:"y';
    const svc = sanOnlyCert({ dir: peers, ca: join(peers, "ca.crt") }, join(dir, "quoted"), [
      ["DNS", "n1,n2"],
      ["DNS", "n3, DNS:n4"],
      ["DNS", hostile],
      ["DNS", "it's\\"],
      ["email", "n5"],
      ["URI", "n6"],
      ["otherName", "1.3.6.1.5.5.7.8.5;UTF8:n7"],
      ["IP", "127.0.0.1"],
    ]);
    const cert = new X509Certificate(readFileSync(svc.cert));
    assert.equal(
      cert.subjectAltName,
      [
        'DNS:"n1\\u002cn2"',
        'DNS:"n3\\u002c DNS:n4"',
        'DNS:"x\\"\\u002c DNS:n4\\u002c DNS:\\"y"',
        `DNS:"it's\\\\"`,
        "email:n5",
        "URI:n6",
        "othername:XmppAddr:n7",
        "IP Address:127.0.0.1",
      ].join(", "),
    );
    assert.deepEqual(certificateNames(cert), [
      "n1,n2",
      "n3, DNS:n4",
      hostile,
      "it's\\",
      "127.0.0.1",
    ]);
    const check = (id: string): Error | undefined =>
      checkPeerName(id)("localhost", { raw: cert.raw } as PeerCertificate);
    assert.equal(check("n1,n2"), undefined);
    assert.equal(check(hostile), undefined);
    // Only a DNS name or an address is a node's: an email address, a URI or an other name
    // spelled like a node id is not; neither is a piece of a name, nor what a crafted name
    // spells after a comma.
    for (const id of ["n1", "n2", "n3", "n4", "n5", "n6", "n7", "x", "y", '"y']) {
      assert.match(String(check(id)), /not node .* that was dialed/, id);
    }
  });

  it("dials a node only when its certificate names the node id dialed", async () => {
    const tls = new PeerTls({
      certFile: node.cert,
      keyFile: node.key,
      peerCaFile: join(peers, "ca.crt"),
    });
    try {
      assert.equal(await handshake(tls.dial("n1")), null);
      const wrong = await handshake(tls.dial("n2"));
      assert.match(String(wrong), /names \["n1","127.0.0.1"\], not node "n2" that was dialed/);
    } finally {
      tls.close();
    }
  });
});
