/**
 * TLS for clients on one node (tls.*, src/api/tls-front.ts), against the real server process:
 * gRPC over TLS 1.3 with ALPN h2 from plain grpc-js, cleartext to the TLS port and TLS to a
 * cleartext one (a clear error, the node unharmed), handshakes that never finish (bounded by
 * rpc.handshake_timeout_ms), mutual TLS refusing a client without a certificate, with one of
 * another CA or an expired one (in I/O threads), and the files reloaded while a connection made
 * before keeps working, unusable files refused and the ones before kept (with shard workers).
 */
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { connect as tcpConnect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { connect as tlsConnect, type ConnectionOptions, type TLSSocket } from "node:tls";
import { credentials } from "@grpc/grpc-js";
import { CairnClient, ServerError, UnavailableError } from "../../src/client/index.ts";
import { eventually } from "../support/cluster-process.ts";
import { connect, type Reply } from "../support/grpc-client.ts";
import { type ServerProcess, startServer } from "../support/server-process.ts";
import { type CertSet, expiredCert, makeCerts } from "../support/tls-certs.ts";

const b = (s: string): Buffer => Buffer.from(s);
const dir = mkdtempSync(join(tmpdir(), "cairn-e2e-tls-"));
let certs: CertSet;
let other: CertSet;
after(() => rmSync(dir, { recursive: true, force: true }));

/**
 * The test clients' channel options: connections of their own, and the name the node's
 * certificate carries (localhost) as the TLS server name, which grpc-js otherwise takes from the
 * address: an IP, which Node warns about (DEP0123).
 */
const CHANNEL = {
  "grpc.use_local_subchannel_pool": 1,
  "grpc.ssl_target_name_override": "localhost",
};
before(() => {
  certs = makeCerts(join(dir, "certs"));
  other = makeCerts(join(dir, "other"));
});

function tlsEnv(c: CertSet, extra: Record<string, string> = {}): Record<string, string> {
  return { CAIRN_TLS_CERT_FILE: c.nodeCert, CAIRN_TLS_KEY_FILE: c.nodeKey, ...extra };
}

function hostPort(address: string): { host: string; port: number } {
  const i = address.lastIndexOf(":");
  return { host: address.slice(0, i), port: Number(address.slice(i + 1)) };
}

/** A TLS handshake with the node: the socket once it is secure, or the error that ended it. */
function handshake(address: string, options: ConnectionOptions): Promise<TLSSocket> {
  return new Promise((resolve, reject) => {
    const socket = tlsConnect({ ...hostPort(address), servername: "localhost", ...options }, () =>
      resolve(socket),
    );
    socket.once("error", reject);
    socket.once("close", () => reject(new Error("closed during the handshake")));
  });
}

/** Resolves with the ms until `socket` closes; fails past `withinMs`. */
function closes(socket: Socket, withinMs: number): Promise<number> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`still open after ${withinMs} ms`)), withinMs);
    socket.on("error", () => undefined);
    socket.once("close", () => {
      clearTimeout(timer);
      resolve(performance.now() - started);
    });
  });
}

function client(
  server: ServerProcess,
  tls?: { ca?: string; cert?: string; key?: string },
): CairnClient {
  return new CairnClient({
    endpoints: [server.rpc],
    timeoutMs: 3000,
    routing: false,
    channelOptions: CHANNEL,
    ...(tls === undefined
      ? {}
      : {
          tls: {
            ...(tls.ca === undefined ? {} : { ca: readFileSync(tls.ca) }),
            ...(tls.cert === undefined ? {} : { cert: readFileSync(tls.cert) }),
            ...(tls.key === undefined ? {} : { key: readFileSync(tls.key) }),
          },
        }),
  });
}

async function rejectsWith(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (err) {
    return err as Error;
  }
  assert.fail("the call succeeded");
}

describe("TLS on the front end (real server process)", () => {
  let server: ServerProcess;
  before(async () => {
    server = await startServer({
      dataDir: join(dir, "tls"),
      env: tlsEnv(certs, { CAIRN_RPC_HANDSHAKE_TIMEOUT_MS: "500" }),
    });
  });
  after(() => server.stop());

  it("serves gRPC over TLS 1.3 with ALPN h2: Put, Get and Scan from plain grpc-js", async () => {
    const c = connect(server.rpc, CHANNEL, credentials.createSsl(readFileSync(certs.ca)));
    try {
      await c.call(c.kv, "Put", { key: b("tls/a"), value: b("one") });
      const got = await c.call(c.kv, "Get", { key: b("tls/a") });
      assert.equal(got["found"], true);
      assert.equal(Buffer.from(got["value"] as Uint8Array).toString(), "one");
      const scan = await c.call(c.kv, "Scan", { prefix: b("tls/") });
      assert.equal((scan["items"] as Reply[]).length, 1);
    } finally {
      c.close();
    }
    const socket = await handshake(server.rpc, {
      ca: readFileSync(certs.ca),
      ALPNProtocols: ["h2"],
    });
    try {
      assert.equal(socket.getProtocol(), "TLSv1.3");
      assert.equal(socket.alpnProtocol, "h2");
      assert.equal(socket.getPeerCertificate().subject.CN, "n1");
    } finally {
      socket.destroy();
    }
  });

  it("exports when its certificate stops being valid", async () => {
    const notAfter = new X509Certificate(readFileSync(certs.nodeCert)).validToDate.getTime();
    const res = await fetch(`http://${server.http}/metrics`);
    const text = await res.text();
    assert.match(
      text,
      new RegExp(
        `^cairn_tls_certificate_expiry_timestamp_seconds\\{key="tls\\.cert_file"\\} ${Math.floor(notAfter / 1000)}$`,
        "m",
      ),
    );
  });

  it("refuses TLS before 1.2 and a client that does not offer h2", async () => {
    const ca = readFileSync(certs.ca);
    await assert.rejects(
      handshake(server.rpc, {
        ca,
        ALPNProtocols: ["h2"],
        maxVersion: "TLSv1.1",
        minVersion: "TLSv1",
      }),
    );
    await assert.rejects(
      handshake(server.rpc, { ca, ALPNProtocols: ["http/1.1"] }),
      /no_application_protocol|no application protocol/i,
    );
    // No ALPN at all: the handshake ends, and the node closes the connection unserved.
    const bare = await handshake(server.rpc, { ca });
    await closes(bare, 5000);
  });

  it("answers a cleartext client with an error that says the node serves TLS only", async () => {
    const cleartext = client(server);
    try {
      const err = await rejectsWith(cleartext.put("k", "v"));
      assert.ok(err instanceof ServerError, String(err));
      assert.equal(err.code, "CAIRN_ERR_TLS_REQUIRED");
      assert.match(err.message, /serves TLS only.*--cacert/);
    } finally {
      cleartext.close();
    }
    // Unharmed: a TLS client is served.
    const tls = client(server, { ca: certs.ca });
    try {
      await tls.put("after-cleartext", "ok");
      assert.equal(await tls.getString("after-cleartext"), "ok");
    } finally {
      tls.close();
    }
  });

  it("closes connections whose handshake never finishes within rpc.handshake_timeout_ms", async () => {
    const { host, port } = hostPort(server.rpc);
    const open = (first: Buffer | null): Socket => {
      const s = tcpConnect({ host, port });
      if (first !== null) s.write(first);
      return s;
    };
    // Silent sockets, and sockets that start a ClientHello and never finish it: each is closed
    // by the node after 500 ms (the default is 10 s), all of them.
    const partialHello = Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01]);
    const sockets = [
      ...Array.from({ length: 20 }, () => open(null)),
      ...Array.from({ length: 20 }, () => open(partialHello)),
    ];
    const times = await Promise.all(sockets.map((s) => closes(s, 5000)));
    for (const t of times) assert.ok(t >= 400, `closed after ${t} ms, before the timeout`);
    const tls = client(server, { ca: certs.ca });
    try {
      await tls.put("after-flood", "ok");
    } finally {
      tls.close();
    }
  });
});

describe("TLS to a cleartext node (real server process)", () => {
  it("fails with an error that says the port speaks no TLS, and the node serves on", async () => {
    const server = await startServer({ dataDir: join(dir, "cleartext") });
    try {
      const tls = client(server, { ca: certs.ca });
      try {
        const err = await rejectsWith(tls.get("k"));
        assert.ok(err instanceof UnavailableError, String(err));
        assert.match(err.message, /does not speak TLS on this port/);
      } finally {
        tls.close();
      }
      const cleartext = client(server);
      try {
        await cleartext.put("k", "v");
        assert.equal(await cleartext.getString("k"), "v");
      } finally {
        cleartext.close();
      }
    } finally {
      await server.stop();
    }
  });
});

describe("mutual TLS, in gRPC I/O threads (real server process)", () => {
  let server: ServerProcess;
  before(async () => {
    server = await startServer({
      dataDir: join(dir, "mtls"),
      env: tlsEnv(certs, { CAIRN_TLS_CLIENT_CA_FILE: certs.ca, CAIRN_RPC_IO_THREADS: "2" }),
    });
  });
  after(() => server.stop());

  it("serves a client whose certificate the client CA signed", async () => {
    const c = client(server, { ca: certs.ca, cert: certs.clientCert, key: certs.clientKey });
    try {
      await c.put("mtls", "yes");
      assert.equal(await c.getString("mtls"), "yes");
    } finally {
      c.close();
    }
  });

  async function refused(
    tls: { ca: string; cert?: string; key?: string },
    logged: RegExp,
  ): Promise<void> {
    const c = client(server, tls);
    try {
      const err = await rejectsWith(c.put("mtls", "no"));
      assert.ok(err instanceof ServerError, String(err));
      assert.equal(err.code, "CAIRN_ERR_TLS_CLIENT_REFUSED");
    } finally {
      c.close();
    }
    await eventually("the refusal is logged", () =>
      Promise.resolve(
        server.lines.some(
          (l) => l.includes('"code":"CAIRN_ERR_TLS_CLIENT_REFUSED"') && logged.test(l),
        ),
      ),
    );
  }

  it("refuses a client without a certificate", async () => {
    await refused({ ca: certs.ca }, /presented no certificate/);
  });

  it("refuses a client whose certificate another CA signed", async () => {
    await refused(
      { ca: certs.ca, cert: other.clientCert, key: other.clientKey },
      /its certificate \(alice\) is refused: (UNABLE_TO_GET_ISSUER_CERT|UNABLE_TO_VERIFY_LEAF_SIGNATURE)/,
    );
  });

  it("refuses a client whose certificate expired", async () => {
    const old = expiredCert(certs, join(dir, "expired-client"), "old-client");
    await refused(
      { ca: certs.ca, cert: old.cert, key: old.key },
      /old-client\) is refused: CERT_HAS_EXPIRED/,
    );
  });
});

describe("certificate reload, with shard workers (real server process)", () => {
  it("new handshakes use the new files; a connection made before keeps working", async () => {
    // The node's files, in a directory of their own, replaced by renames as a manager would.
    const live = join(dir, "live");
    const first = makeCerts(join(dir, "first"));
    const second = makeCerts(join(dir, "second"));
    const install = (c: CertSet): void => {
      for (const [from, to] of [
        [c.nodeKey, "node.key"],
        [c.nodeCert, "node.crt"],
      ] as const) {
        writeFileSync(join(live, `${to}.tmp`), readFileSync(from));
        renameSync(join(live, `${to}.tmp`), join(live, to));
      }
    };
    mkdirSync(live);
    install(first);
    const server = await startServer({
      dataDir: join(dir, "reload"),
      env: {
        CAIRN_TLS_CERT_FILE: join(live, "node.crt"),
        CAIRN_TLS_KEY_FILE: join(live, "node.key"),
        CAIRN_SHARD_WORKERS: "2",
        CAIRN_CLUSTER_TOTAL_SHARDS: "8",
      },
    });
    const before = client(server, { ca: first.ca });
    try {
      await before.put("reload/before", "1");
      // A key that is not the certificate's: refused and logged, the files read before kept.
      writeFileSync(join(live, "node.key.tmp"), readFileSync(second.nodeKey));
      renameSync(join(live, "node.key.tmp"), join(live, "node.key"));
      await eventually("the unusable files are logged", () =>
        Promise.resolve(
          server.lines.some(
            (l) =>
              l.includes('"code":"CAIRN_ERR_TLS_RELOAD"') &&
              l.includes("is not the key of the certificate in tls.cert_file"),
          ),
        ),
      );
      const kept = await handshake(server.rpc, {
        ca: readFileSync(first.ca),
        ALPNProtocols: ["h2"],
      });
      kept.destroy();
      install(second);
      const fingerprint = new X509Certificate(readFileSync(second.nodeCert)).fingerprint256;
      // Each shard worker reloads on its own: every one of several new handshakes (spread over
      // both workers' listeners by the kernel) must present the new certificate.
      await eventually("new handshakes present the new certificate", async () => {
        for (let i = 0; i < 8; i++) {
          const s = await handshake(server.rpc, {
            ca: readFileSync(second.ca),
            ALPNProtocols: ["h2"],
          });
          const seen = s.getPeerCertificate().fingerprint256;
          s.destroy();
          if (seen !== fingerprint) return false;
        }
        return true;
      });
      const after = client(server, { ca: second.ca });
      try {
        await after.put("reload/after", "2");
        assert.equal(await after.getString("reload/before"), "1");
      } finally {
        after.close();
      }
      // The connection made before the reload is still open and served: a new one with the
      // first CA could not be made any more.
      await before.put("reload/old-connection", "3");
      assert.equal(await before.getString("reload/after"), "2");
      assert.ok(server.lines.some((l) => l.includes("the TLS files changed and were reloaded")));
    } finally {
      before.close();
      await server.stop();
    }
  });
});
