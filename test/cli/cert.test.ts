/**
 * `cairn cert` and the client commands' TLS flags, end to end: certificates made with the
 * command line, a node started with them (mutual TLS), and Put, Get and Scan through
 * `cairn --cacert --cert --key` and through plain grpc-js with credentials.createSsl.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { X509Certificate } from "node:crypto";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { credentials } from "@grpc/grpc-js";
import { connect, type Reply } from "../support/grpc-client.ts";
import { CAIRN, cleanEnv, ROOT, startServer } from "../support/server-process.ts";
import type { PeerCertificate } from "node:tls";
import { readGossipKeyFile } from "../../src/common/gossip-keys.ts";
import { certificateNames, checkPeerName } from "../../src/common/peer-tls.ts";
import { certCommand } from "../support/tls-certs.ts";

const dir = mkdtempSync(join(tmpdir(), "cairn-cli-cert-"));
after(() => rmSync(dir, { recursive: true, force: true }));

interface Run {
  readonly code: number | null;
  readonly out: string;
  readonly err: string;
}

function cairn(args: readonly string[], env: Record<string, string> = {}): Promise<Run> {
  const proc = spawn(CAIRN, [...args], { cwd: ROOT, env: cleanEnv(env), stdio: "pipe" });
  let out = "";
  let err = "";
  proc.stdout.on("data", (d: Buffer) => (out += d.toString()));
  proc.stderr.on("data", (d: Buffer) => (err += d.toString()));
  proc.stdin.end();
  return new Promise((resolve) => proc.once("close", (code) => resolve({ code, out, err })));
}

describe("cairn cert, and a node over mutual TLS through the CLI and grpc-js", () => {
  it("creates a CA, a node and a client certificate; the CLI and grpc-js talk to the node", async () => {
    const certs = join(dir, "certs");
    const made = [
      await cairn(["cert", "create-ca", "--certs-dir", certs]),
      await cairn([
        "cert",
        "create-node",
        "n1",
        "--host",
        "127.0.0.1",
        "--host",
        "localhost",
        "--certs-dir",
        certs,
      ]),
      await cairn(["cert", "create-client", "alice", "--certs-dir", certs]),
    ];
    for (const r of made) assert.equal(r.code, 0, r.err);
    assert.match(made[1]?.out ?? "", /wrote .*node\.crt and .*node\.key/);
    for (const key of ["ca.key", "node.key", "client.alice.key"])
      assert.equal(statSync(join(certs, key)).mode & 0o777, 0o600, key);
    // The node id is a name of the node's certificate (its peers check it), beside the hosts.
    const node = new X509Certificate(readFileSync(join(certs, "node.crt")));
    assert.equal(node.subjectAltName, "DNS:n1, IP Address:127.0.0.1, DNS:localhost");
    assert.match(node.subject, /CN=n1/);

    const server = await startServer({
      dataDir: join(dir, "data"),
      env: {
        CAIRN_TLS_CERT_FILE: join(certs, "node.crt"),
        CAIRN_TLS_KEY_FILE: join(certs, "node.key"),
        CAIRN_TLS_CLIENT_CA_FILE: join(certs, "ca.crt"),
      },
    });
    try {
      const flags = [
        "--endpoints",
        server.rpc,
        "--cacert",
        join(certs, "ca.crt"),
        "--cert",
        join(certs, "client.alice.crt"),
        "--key",
        join(certs, "client.alice.key"),
      ];
      const put = await cairn([...flags, "put", "cli/a", "alpha"]);
      assert.equal(put.code, 0, put.err);
      assert.match(put.out, /^OK \d+\/\d+/);
      assert.equal(put.err, "", "nothing on stderr (no warning about the IP address)");
      const get = await cairn(["get", "cli/a", ...flags]);
      assert.equal(get.code, 0, get.err);
      assert.equal(get.out, "alpha");
      // The same through the environment.
      const scan = await cairn(["scan", "--prefix", "cli/"], {
        CAIRN_ENDPOINTS: server.rpc,
        CAIRN_CACERT: join(certs, "ca.crt"),
        CAIRN_CERT: join(certs, "client.alice.crt"),
        CAIRN_KEY: join(certs, "client.alice.key"),
      });
      assert.equal(scan.code, 0, scan.err);
      assert.equal(scan.out, "cli/a\talpha\n");
      // Without a client certificate: refused, and said so.
      const bare = await cairn([
        "get",
        "cli/a",
        "--endpoints",
        server.rpc,
        "--cacert",
        join(certs, "ca.crt"),
      ]);
      assert.equal(bare.code, 5);
      assert.match(bare.err, /refused this client's certificate.*--cert --key/);
      // Without TLS at all.
      const clear = await cairn(["get", "cli/a", "--endpoints", server.rpc]);
      assert.equal(clear.code, 5);
      assert.match(clear.err, /serves TLS only.*--cacert/);

      const c = connect(
        server.rpc,
        {},
        credentials.createSsl(
          readFileSync(join(certs, "ca.crt")),
          readFileSync(join(certs, "client.alice.key")),
          readFileSync(join(certs, "client.alice.crt")),
        ),
      );
      try {
        await c.call(c.kv, "Put", { key: Buffer.from("cli/b"), value: Buffer.from("beta") });
        const got = await c.call(c.kv, "Get", { key: Buffer.from("cli/a") });
        assert.equal(Buffer.from(got["value"] as Uint8Array).toString(), "alpha");
        const items = (await c.call(c.kv, "Scan", { prefix: Buffer.from("cli/") }))[
          "items"
        ] as Reply[];
        assert.deepEqual(
          items.map((i) => Buffer.from(i["key"] as Uint8Array).toString()),
          ["cli/a", "cli/b"],
        );
      } finally {
        c.close();
      }
    } finally {
      await server.stop();
    }
  });

  it("refuses bad requests: no CA yet, no --host, an existing file, a bad name", () => {
    const certs = join(dir, "bad");
    const noCa = certCommand(["create-node", "n1", "--host", "127.0.0.1", "--certs-dir", certs]);
    assert.equal(noCa.code, 2);
    assert.match(
      noCa.err,
      /the CA's certificate \S*ca\.crt does not exist: run 'cairn cert create-ca' first, or pass --ca-cert FILE/,
    );
    assert.equal(certCommand(["create-ca", "--certs-dir", certs]).code, 0);
    const again = certCommand(["create-ca", "--certs-dir", certs]);
    assert.equal(again.code, 2);
    assert.match(again.err, /ca\.crt exists; pass --overwrite/);
    assert.equal(certCommand(["create-ca", "--certs-dir", certs, "--overwrite"]).code, 0);
    const noHost = certCommand(["create-node", "n1", "--certs-dir", certs]);
    assert.equal(noHost.code, 2);
    assert.match(noHost.err, /at least one --host/);
    // A new node's files in a directory of their own, the CA kept elsewhere: both CA files named.
    const apart = join(dir, "apart", "n4");
    const createN4 = (...ca: string[]): ReturnType<typeof certCommand> =>
      certCommand(["create-node", "n4", "--host", "127.0.0.4", "--certs-dir", apart, ...ca]);
    assert.match(createN4().err, /ca\.crt does not exist/);
    const noKey = createN4("--ca-cert", join(certs, "ca.crt"), "--ca-key", join(certs, "no.key"));
    assert.equal(noKey.code, 2);
    assert.match(noKey.err, /the CA's key \S*no\.key does not exist: .*or pass --ca-key FILE/);
    const apartNode = createN4(
      "--ca-cert",
      join(certs, "ca.crt"),
      "--ca-key",
      join(certs, "ca.key"),
    );
    assert.equal(apartNode.code, 0, apartNode.err);
    assert.ok(existsSync(join(apart, "node.key")));
    const signed = new X509Certificate(readFileSync(join(apart, "node.crt")));
    const ca = new X509Certificate(readFileSync(join(certs, "ca.crt")));
    assert.ok(signed.verify(ca.publicKey), "the node certificate is signed by the CA named");
    const badName = certCommand(["create-client", "a/b", "--certs-dir", certs]);
    assert.equal(badName.code, 2);
    assert.match(badName.err, /the client NAME "a\/b" must be/);
    assert.equal(certCommand(["create-thing"]).code, 2);
  });

  it("makes a certificate for a node id of any length the configuration takes; a client NAME fits a CN", () => {
    // node_id is 1 to 128 characters; a certificate's CN at most 64 (X.509's bound).
    const certs = join(dir, "long");
    assert.equal(certCommand(["create-ca", "--certs-dir", certs]).code, 0);
    for (const id of [`n${"x".repeat(63)}`, `n${"x".repeat(127)}`]) {
      const made = certCommand(["create-node", id, "--host", "127.0.0.1", "--certs-dir", certs]);
      assert.equal(made.code, 0, made.err);
      const cert = new X509Certificate(readFileSync(join(certs, "node.crt")));
      assert.equal(cert.subject.includes(`CN=${id}`), id.length <= 64, cert.subject);
      // Its peers take it as node `id`'s.
      assert.equal(checkPeerName(id)("", { raw: cert.raw } as PeerCertificate), undefined);
      assert.deepEqual(
        certificateNames(cert).filter((n) => n !== "127.0.0.1"),
        [id],
      );
      rmSync(join(certs, "node.crt"));
      rmSync(join(certs, "node.key"));
    }
    const client = certCommand(["create-client", "c".repeat(65), "--certs-dir", certs]);
    assert.equal(client.code, 2, client.err);
    assert.match(client.err, /the client NAME "c+" must be 1 to 64 letters/);
    assert.equal(certCommand(["create-client", "c".repeat(64), "--certs-dir", certs]).code, 0);
  });

  it("creates a gossip key the configuration takes, 0600, once; without openssl", () => {
    const certs = join(dir, "gossip");
    const path = process.env["PATH"];
    process.env["PATH"] = join(dir, "no-such-bin"); // node:crypto makes it, not openssl
    try {
      const made = certCommand(["create-gossip-key", "--certs-dir", certs]);
      assert.equal(made.code, 0, made.err);
      assert.match(made.out, /wrote \S*gossip\.key/);
    } finally {
      process.env["PATH"] = path;
    }
    const file = join(certs, "gossip.key");
    assert.equal(statSync(file).mode & 0o777, 0o600);
    const keys = readGossipKeyFile(file);
    assert.equal(keys.length, 1);
    assert.equal(keys[0].key.length, 32);
    const again = certCommand(["create-gossip-key", "--certs-dir", certs]);
    assert.equal(again.code, 2);
    assert.match(again.err, /gossip\.key exists; pass --overwrite/);
    assert.equal(certCommand(["create-gossip-key", "--certs-dir", certs, "--overwrite"]).code, 0);
    assert.ok(!readGossipKeyFile(file)[0].key.equals(keys[0].key), "a new key");
    assert.equal(certCommand(["create-gossip-key", "extra", "--certs-dir", certs]).code, 2);
  });

  it("writes every key 0600 with --overwrite, even over a file others could read", () => {
    const certs = join(dir, "loose");
    mkdirSync(certs, { recursive: true });
    // Keys left readable by others (copied under a umask of 022, say): replaced, not rewritten.
    const keys = ["ca.key", "node.key", "client.bob.key", "gossip.key"];
    for (const key of keys) {
      writeFileSync(join(certs, key), "old\n");
      chmodSync(join(certs, key), 0o644);
    }
    for (const args of [
      ["create-ca"],
      ["create-node", "n1", "--host", "127.0.0.1"],
      ["create-client", "bob"],
      ["create-gossip-key"],
    ]) {
      const r = certCommand([...args, "--certs-dir", certs, "--overwrite"]);
      assert.equal(r.code, 0, r.err);
    }
    for (const key of keys) {
      assert.equal(statSync(join(certs, key)).mode & 0o777, 0o600, key);
      assert.notEqual(readFileSync(join(certs, key), "utf8"), "old\n", key);
    }
  });

  it("says which file it could not write, exit 5, when its directory cannot hold them", async () => {
    // The error escaped: a stack trace and exit 1, which the client commands use for "not found"
    // (an audit, 2026-12-07).
    const file = join(dir, "a-file");
    writeFileSync(file, "");
    const under = join(file, "certs");
    for (const args of [["create-gossip-key"], ["create-ca"]]) {
      const r = await cairn(["cert", ...args, "--certs-dir", under]);
      assert.equal(r.code, 5, `${args.join(" ")}: ${r.err}`);
      assert.match(r.err, /^cairn cert: cannot write .*certs.*: ENOTDIR/);
      assert.doesNotMatch(r.err, /\n\s+at /, "no stack trace");
    }
  });

  it("says so when the openssl binary is missing", () => {
    const path = process.env["PATH"];
    process.env["PATH"] = join(dir, "no-such-bin");
    try {
      const r = certCommand(["create-ca", "--certs-dir", join(dir, "no-openssl")]);
      assert.equal(r.code, 5);
      assert.match(r.err, /the openssl binary is not on the PATH/);
    } finally {
      process.env["PATH"] = path;
    }
  });
});
