/**
 * Access control on rpc_addr (src/api/authz.ts, call-auth.ts; docs/operations.md "Who may call
 * what") against the real server process: bearer tokens from auth.tokens_file (cleartext on
 * loopback, the front end in an I/O thread) — none, a bad one, one without the role, an admin
 * one, a client calling a peer method, the refusals counted and logged without the token, the
 * file reloaded — then client certificates under mutual TLS (the front end in the main thread):
 * none, another CA's, an expired one, roles from the OU, one with an empty subject named by
 * its subject alternative name; a token calling a peer method beside peer TLS (refused as a
 * client's, not for want of a certificate); and the node's certificate rotated under load with
 * two shard workers, no call failing. Each node is checked unharmed afterwards.
 */
import assert from "node:assert/strict";
import { createHash, X509Certificate } from "node:crypto";
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { connect as tlsConnect } from "node:tls";
import {
  type ChannelCredentials,
  Client,
  credentials,
  Metadata,
  type ServiceError,
} from "@grpc/grpc-js";
import { CairnClient, ServerError } from "../../src/client/index.ts";
import { loadCairnProto } from "../../src/api/proto.ts";
import { shardForKey } from "../../src/cluster/index.ts";
import { eventually, freePort } from "../support/cluster-process.ts";
import { metricValue, type ServerProcess, startServer } from "../support/server-process.ts";
import {
  type CertSet,
  certCommand,
  expiredCert,
  makeCerts,
  refusedCertificates,
  sanOnlyClientCert,
} from "../support/tls-certs.ts";

const dir = mkdtempSync(join(tmpdir(), "cairn-e2e-authz-"));
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

const READ_TOKEN = "read-token-0123456789abcdef";
const WRITE_TOKEN = "write-token-0123456789abcdef";
const ADMIN_TOKEN = "admin-token-0123456789abcdef";
const NEW_TOKEN = "new-token-0123456789abcdef01";
const hashSync = (s: string): string => createHash("sha256").update(s).digest("hex");

/** Writes `text` to `file` by a rename, as a configuration manager would. */
function replaceFile(file: string, text: string): void {
  writeFileSync(`${file}.new`, text);
  renameSync(`${file}.new`, file);
}

function tokensYaml(extra = ""): string {
  return [
    "tokens:",
    "  - name: reader",
    "    role: read",
    `    token: ${READ_TOKEN}`,
    "  - name: writer",
    "    role: readwrite",
    `    sha256: ${hashSync(WRITE_TOKEN)}`,
    "  - name: root",
    "    role: admin",
    `    token: ${ADMIN_TOKEN}`,
    extra,
  ].join("\n");
}

/** A unary call of `path` with raw bytes and `metadata`; resolves with the answer or the error. */
function rawCall(
  address: string,
  path: string,
  request: Buffer,
  metadata: Record<string, string>,
  creds: ChannelCredentials = credentials.createInsecure(),
): Promise<{ ok: true; bytes: Buffer } | { ok: false; err: ServiceError }> {
  const client = new Client(address, creds, CHANNEL);
  const md = new Metadata();
  for (const [k, v] of Object.entries(metadata)) md.set(k, v);
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      path,
      (b: Buffer) => b,
      (b: Buffer) => b,
      request,
      md,
      { deadline: Date.now() + 5000 },
      (err, bytes) => {
        client.close();
        resolve(err === null ? { ok: true, bytes: bytes as Buffer } : { ok: false, err });
      },
    );
  });
}

/** A KV Get request for `key` (field 1, bytes). */
function getRequest(key: string): Buffer {
  const k = Buffer.from(key);
  return Buffer.concat([Buffer.from([0x0a, k.length]), k]);
}

async function refusal(p: Promise<unknown>): Promise<ServerError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof ServerError, String(err));
    return err;
  }
  assert.fail("the call succeeded");
}

/** The cluster id in the first view a Meta.WatchCluster call gets; false while it is "" or fails. */
function firstViewClusterId(address: string, creds: ChannelCredentials): Promise<string | false> {
  const { proto } = loadCairnProto();
  const client = new proto.cairn.v1.Meta(address, creds, CHANNEL);
  return new Promise((resolve) => {
    const call = client.WatchCluster({}, { deadline: Date.now() + 5000 });
    const finish = (id: string | false): void => {
      call.cancel();
      client.close();
      resolve(id);
    };
    call.on("data", (view: { cluster_id?: string }) =>
      finish(view.cluster_id === undefined || view.cluster_id === "" ? false : view.cluster_id),
    );
    call.on("error", () => finish(false));
  });
}

function tokenClient(server: ServerProcess, token: string | undefined): CairnClient {
  return new CairnClient({
    endpoints: [server.rpc],
    timeoutMs: 3000,
    routing: false,
    channelOptions: CHANNEL,
    ...(token === undefined ? {} : { token }),
  });
}

describe("bearer tokens (auth.tokens_file, cleartext on loopback, one I/O thread)", () => {
  let server: ServerProcess;
  const tokensFile = join(dir, "tokens.yaml");
  before(async () => {
    writeFileSync(tokensFile, tokensYaml());
    server = await startServer({
      dataDir: join(dir, "tokens"),
      env: { CAIRN_AUTH_TOKENS_FILE: tokensFile, CAIRN_RPC_IO_THREADS: "1" },
    });
  });
  after(() => server.stop());

  it("answers a call without credentials or with a bad token UNAUTHENTICATED, never quoting it", async () => {
    const none = await rawCall(server.rpc, "/cairn.v1.KV/Get", getRequest("k"), {});
    assert.ok(!none.ok);
    assert.equal(none.err.code, 16); // UNAUTHENTICATED
    assert.deepEqual(none.err.metadata.get("cairn-error-code"), ["CAIRN_ERR_UNAUTHENTICATED"]);
    assert.match(none.err.details, /needs credentials/);
    const bad = "Bearer not-a-listed-token-5e1f";
    for (const authorization of [bad, "Basic dXNlcjpwYXNz", "Bearer"]) {
      const r = await rawCall(server.rpc, "/cairn.v1.KV/Get", getRequest("k"), { authorization });
      assert.ok(!r.ok);
      assert.equal(r.err.code, 16, authorization);
      assert.ok(!r.err.details.includes("5e1f") && !r.err.details.includes("dXNlcjpwYXNz"));
    }
    // Unknown methods too: no answer tells an anonymous caller which methods exist.
    const unknown = await rawCall(server.rpc, "/cairn.v1.Nope/Nothing", Buffer.alloc(0), {});
    assert.ok(!unknown.ok && unknown.err.code === 16);
    // The health service stays open to probes (SERVING = 1).
    const health = await rawCall(server.rpc, "/grpc.health.v1.Health/Check", Buffer.alloc(0), {});
    assert.ok(health.ok);
    assert.deepEqual([...health.bytes], [0x08, 0x01]);
    // The client library's own error.
    const anonymous = tokenClient(server, undefined);
    try {
      const err = await refusal(anonymous.get("k"));
      assert.equal(err.code, "CAIRN_ERR_UNAUTHENTICATED");
    } finally {
      anonymous.close();
    }
  });

  it("lets a read token Get and Scan, and refuses its Put, Delete and Admin calls PERMISSION_DENIED", async () => {
    const writer = tokenClient(server, WRITE_TOKEN);
    const reader = tokenClient(server, READ_TOKEN);
    try {
      await writer.put("authz/a", "one");
      assert.equal(await reader.getString("authz/a"), "one");
      assert.equal((await reader.scan({ prefix: "authz/" })).items.length, 1);
      for (const call of [
        reader.put("authz/a", "two"),
        reader.delete("authz/a"),
        reader.snapshotShard(shardForKey(Buffer.from("authz/a"), 1024)),
      ]) {
        const err = await refusal(call);
        assert.equal(err.code, "CAIRN_ERR_PERMISSION_DENIED");
        assert.match(err.message, /needs role (readwrite|admin); client "reader" \(role read/);
      }
      assert.equal(await writer.getString("authz/a"), "one", "the refused Put changed nothing");
    } finally {
      writer.close();
      reader.close();
    }
  });

  it("refuses a readwrite token's Admin calls and serves an admin token's", async () => {
    const writer = tokenClient(server, WRITE_TOKEN);
    const admin = tokenClient(server, ADMIN_TOKEN);
    const shard = shardForKey(Buffer.from("authz/a"), 1024);
    try {
      const err = await refusal(writer.snapshotShard(shard));
      assert.equal(err.code, "CAIRN_ERR_PERMISSION_DENIED");
      const snap = await admin.snapshotShard(shard);
      assert.equal(snap.shardId, shard);
      // Past the gate: a single node has no members to decommission, which is the handler's say.
      const member = await refusal(admin.decommissionNode("node-1"));
      assert.equal(member.code, "CAIRN_ERR_PRECONDITION");
    } finally {
      writer.close();
      admin.close();
    }
  });

  it("refuses a client calling a peer method, even an admin one naming a peer", async () => {
    for (const path of ["/cairn.v1.Raft/ReadIndex", "/cairn.v1.Raft/ProposeMeta"]) {
      const r = await rawCall(server.rpc, path, Buffer.alloc(0), {
        authorization: `Bearer ${ADMIN_TOKEN}`,
        "cairn-peer": "node-2",
      });
      assert.ok(!r.ok);
      assert.equal(r.err.code, 7, path); // PERMISSION_DENIED
      assert.match(r.err.details, /for the cluster's nodes only; client "root"/);
    }
  });

  it("counts the refusals in kv_requests_total and logs them at WARN without the tokens", async () => {
    // The I/O thread reports each refusal to the main thread, which counts it.
    await eventually(
      "the refusals counted",
      async () => {
        const unauthenticated = await metricValue(
          server,
          'kv_requests_total{operation="get",status="unauthenticated"}',
        );
        const put = await metricValue(
          server,
          'kv_requests_total{operation="put",status="permission_denied"}',
        );
        const del = await metricValue(
          server,
          'kv_requests_total{operation="delete",status="permission_denied"}',
        );
        return unauthenticated >= 5 && put >= 1 && del >= 1;
      },
      5000,
    );
    // Not the server's faults.
    assert.equal(await metricValue(server, 'kv_requests_total{operation="put",status="error"}'), 0);
    await eventually("a refusal logged", async () =>
      server.lines.some((l) => l.includes("a call was refused")),
    );
    const refusals = server.lines.filter((l) => l.includes("a call was refused"));
    for (const line of refusals) {
      const entry = JSON.parse(line) as Record<string, unknown>;
      assert.equal(entry["level"], "WARN");
    }
    for (const secret of [READ_TOKEN, WRITE_TOKEN, ADMIN_TOKEN, "not-a-listed-token-5e1f"]) {
      assert.ok(!server.lines.some((l) => l.includes(secret)), "a token in the log");
      assert.ok(!server.stderr().includes(secret));
    }
  });

  it("reloads the tokens file: a new token works, an unusable file is refused and the old kept", async () => {
    const added = tokenClient(server, NEW_TOKEN);
    try {
      replaceFile(
        tokensFile,
        tokensYaml(
          ["  - name: newcomer", "    role: readwrite", `    token: ${NEW_TOKEN}`].join("\n"),
        ),
      );
      await eventually(
        "the new token accepted",
        async () => {
          await added.put("authz/new", "yes");
          return true;
        },
        10_000,
      );
      replaceFile(tokensFile, "tokens:\n  - name: broken\n    role: superuser\n    token: x\n");
      await eventually(
        "the unusable file reported",
        async () =>
          server.lines.some((l) => l.includes("the tokens file changed but cannot be used")),
        10_000,
      );
      assert.equal(await added.getString("authz/new"), "yes", "the tokens before are kept");
    } finally {
      added.close();
    }
    // Unharmed: still serving, and still refusing.
    assert.equal(server.proc.exitCode, null);
    const admin = tokenClient(server, ADMIN_TOKEN);
    try {
      await admin.put("authz/after", "ok");
      assert.equal(await admin.getString("authz/after"), "ok");
    } finally {
      admin.close();
    }
  });
});

describe("client certificates (mutual TLS, the front end in the main thread)", () => {
  let server: ServerProcess;
  let certs: CertSet;
  let other: CertSet;
  const files = (name: string): { cert: string; key: string } => ({
    cert: join(certs.dir, `client.${name}.crt`),
    key: join(certs.dir, `client.${name}.key`),
  });
  before(async () => {
    certs = makeCerts(join(dir, "certs"));
    other = makeCerts(join(dir, "other"));
    for (const [name, role] of [
      ["carol", "read"],
      ["root", "admin"],
    ] as const) {
      const r = certCommand(["create-client", name, "--role", role, "--certs-dir", certs.dir]);
      assert.equal(r.code, 0, r.err);
    }
    server = await startServer({
      dataDir: join(dir, "mtls"),
      env: {
        CAIRN_TLS_CERT_FILE: certs.nodeCert,
        CAIRN_TLS_KEY_FILE: certs.nodeKey,
        CAIRN_TLS_CLIENT_CA_FILE: certs.ca,
      },
    });
  });
  after(() => server.stop());

  function certClient(c?: { cert: string; key: string }): CairnClient {
    return new CairnClient({
      endpoints: [server.rpc],
      timeoutMs: 3000,
      routing: false,
      channelOptions: CHANNEL,
      tls: {
        ca: readFileSync(certs.ca),
        ...(c === undefined ? {} : { cert: readFileSync(c.cert), key: readFileSync(c.key) }),
      },
    });
  }

  it("refuses no certificate, one of another CA, and an expired one", async () => {
    const expired = expiredCert(certs, join(dir, "expired"), "old");
    for (const c of [
      undefined,
      { cert: other.clientCert, key: other.clientKey },
      { cert: expired.cert, key: expired.key },
    ]) {
      const client = certClient(c);
      try {
        const err = await refusal(client.get("k"));
        assert.equal(err.code, "CAIRN_ERR_TLS_CLIENT_REFUSED", c?.cert ?? "no certificate");
      } finally {
        client.close();
      }
    }
  });

  it("gives a certificate the role of its OU: read, readwrite (alice, the default), admin", async () => {
    const alice = certClient({ cert: certs.clientCert, key: certs.clientKey });
    const carol = certClient(files("carol"));
    const root = certClient(files("root"));
    const shard = shardForKey(Buffer.from("mtls/a"), 1024);
    try {
      await alice.put("mtls/a", "one");
      assert.equal(await carol.getString("mtls/a"), "one");
      const put = await refusal(carol.put("mtls/a", "two"));
      assert.equal(put.code, "CAIRN_ERR_PERMISSION_DENIED");
      assert.match(put.message, /client "carol" \(role read, by certificate\)/);
      const admin = await refusal(alice.snapshotShard(shard));
      assert.equal(admin.code, "CAIRN_ERR_PERMISSION_DENIED");
      assert.equal((await root.snapshotShard(shard)).shardId, shard);
    } finally {
      alice.close();
      carol.close();
      root.close();
    }
  });

  it("refuses a client certificate calling a peer method", async () => {
    const creds = credentials.createSsl(
      readFileSync(certs.ca),
      readFileSync(join(certs.dir, "client.root.key")),
      readFileSync(join(certs.dir, "client.root.crt")),
    );
    const r = await rawCall(
      server.rpc,
      "/cairn.v1.Raft/ConfirmTerms",
      Buffer.alloc(0),
      { "cairn-peer": "n2" },
      creds,
    );
    assert.ok(!r.ok);
    assert.equal(r.err.code, 7);
    assert.match(r.err.details, /client "root" \(role admin, by certificate\)/);
    // Unharmed.
    const alice = certClient({ cert: certs.clientCert, key: certs.clientKey });
    try {
      await alice.put("mtls/after", "ok");
      assert.equal(await alice.getString("mtls/after"), "ok");
    } finally {
      alice.close();
    }
  });

  it("names a certificate with an empty subject by its subject alternative name, and serves on", async () => {
    // SPIFFE's and some service meshes' certificates name their holder by a URI alone.
    const svc = certClient(sanOnlyClientCert(certs, join(dir, "san-only"), "spiffe://cairn/svc"));
    try {
      await svc.put("mtls/san", "one");
      assert.equal(await svc.getString("mtls/san"), "one");
      const admin = await refusal(svc.snapshotShard(0));
      assert.equal(admin.code, "CAIRN_ERR_PERMISSION_DENIED");
      assert.match(
        admin.message,
        /client "spiffe:\/\/cairn\/svc" \(role readwrite, by certificate\)/,
      );
    } finally {
      svc.close();
    }
    assert.equal(server.proc.exitCode, null, "the node serves on");
  });

  it("names it by the whole of an alternative name node:tls quotes (one holding a comma)", async () => {
    // node:tls writes such a name as a JSON string (`URI:"spiffe://cairn/svc\u002cb"`): split
    // on "," and cut at its colon, it kept its quotes and escapes.
    const svc = certClient(
      sanOnlyClientCert(certs, join(dir, "san-comma"), "spiffe://cairn/svc,b"),
    );
    try {
      const admin = await refusal(svc.snapshotShard(0));
      assert.equal(admin.code, "CAIRN_ERR_PERMISSION_DENIED");
      assert.match(
        admin.message,
        /client "spiffe:\/\/cairn\/svc,b" \(role readwrite, by certificate\)/,
      );
    } finally {
      svc.close();
    }
  });
});

describe("one CA for the clients and the peers (a cluster of one, peer TLS)", () => {
  let server: ServerProcess;
  let certs: CertSet;
  before(async () => {
    // docs/operations.md: clients may have a CA of their own, "or the same one".
    certs = makeCerts(join(dir, "shared"));
    const r = certCommand(["create-client", "carol", "--role", "read", "--certs-dir", certs.dir]);
    assert.equal(r.code, 0, r.err);
    const port = await freePort();
    server = await startServer({
      dataDir: join(dir, "shared-n1"),
      args: ["--rpc-addr", `127.0.0.1:${port}`, "--seed-nodes", `127.0.0.1:${port}`],
      env: {
        CAIRN_CLUSTER_BOOTSTRAP_EXPECT: "1",
        CAIRN_TLS_CERT_FILE: certs.nodeCert,
        CAIRN_TLS_KEY_FILE: certs.nodeKey,
        CAIRN_TLS_CLIENT_CA_FILE: certs.ca,
        CAIRN_TLS_PEER_CA_FILE: certs.ca,
      },
    });
  });
  after(() => server.stop());

  const creds = (c: { cert: string; key: string }): ChannelCredentials =>
    credentials.createSsl(readFileSync(certs.ca), readFileSync(c.key), readFileSync(c.cert));

  it("refuses a client certificate the peers' methods, and takes a node's", async () => {
    const before = await refusedCertificates(server.http);
    // carol, a read-only client, calling as herself: the CA that signed her certificate signs
    // the nodes' too, but hers is a client's (`cairn cert create-client`), not a node's.
    const carol = {
      cert: join(certs.dir, "client.carol.crt"),
      key: join(certs.dir, "client.carol.key"),
    };
    // The cluster id, which a reader gets from Meta.WatchCluster: with it a node unknown here is
    // taken for a member that joined since (docs/architecture.md), past the peers' own checks.
    let clusterId = "";
    await eventually("the cluster founded, its id in carol's view", async () => {
      const got = await firstViewClusterId(server.rpc, creds(carol));
      if (got !== false) clusterId = got;
      return got !== false;
    });
    const id = Buffer.from(clusterId);
    const withId = Buffer.concat([Buffer.from([0x0a, id.length]), id]); // cluster_id = 1
    for (const [path, request] of [
      ["/cairn.v1.Raft/ReadIndex", Buffer.alloc(0)],
      ["/cairn.v1.Raft/ReadIndex", withId],
      ["/cairn.v1.Raft/ProposeMeta", Buffer.alloc(0)],
    ] as const) {
      const r = await rawCall(server.rpc, path, request, { "cairn-peer": "carol" }, creds(carol));
      assert.ok(!r.ok, `${path} (${request.length} bytes) was served`);
      assert.equal(r.err.code, 7, `${path}: ${r.err.details}`); // PERMISSION_DENIED
      assert.match(r.err.details, /not a node's certificate/, path);
    }
    assert.equal(await refusedCertificates(server.http), before + 3);
    // A node's certificate by the same CA (n2, calling as itself) passes the certificate check
    // and meets the peers' own checks.
    const n2dir = join(dir, "shared-n2");
    const made = certCommand([
      "create-node",
      "n2",
      "--host",
      "127.0.0.1",
      "--certs-dir",
      n2dir,
      "--ca-cert",
      certs.ca,
      "--ca-key",
      join(certs.dir, "ca.key"),
    ]);
    assert.equal(made.code, 0, made.err);
    const n2 = { cert: join(n2dir, "node.crt"), key: join(n2dir, "node.key") };
    const asN2 = await rawCall(
      server.rpc,
      "/cairn.v1.Raft/ReadIndex",
      Buffer.alloc(0),
      { "cairn-peer": "n2" },
      creds(n2),
    );
    assert.ok(!asN2.ok);
    assert.doesNotMatch(asN2.err.details, /certificate/);
    assert.equal(await refusedCertificates(server.http), before + 3);
    assert.equal(server.proc.exitCode, null, "the node serves on");
  });
});

describe("bearer tokens beside peer TLS (a cluster of one, no client CA)", () => {
  let server: ServerProcess;
  let certs: CertSet;
  before(async () => {
    certs = makeCerts(join(dir, "peer-tokens"));
    const tokensFile = join(dir, "peer-tokens.yaml");
    writeFileSync(tokensFile, tokensYaml());
    const port = await freePort();
    server = await startServer({
      dataDir: join(dir, "peer-tokens-n1"),
      args: ["--rpc-addr", `127.0.0.1:${port}`, "--seed-nodes", `127.0.0.1:${port}`],
      env: {
        CAIRN_CLUSTER_BOOTSTRAP_EXPECT: "1",
        CAIRN_TLS_CERT_FILE: certs.nodeCert,
        CAIRN_TLS_KEY_FILE: certs.nodeKey,
        CAIRN_TLS_PEER_CA_FILE: certs.ca,
        CAIRN_AUTH_TOKENS_FILE: tokensFile,
      },
    });
  });
  after(() => server.stop());

  it("refuses a token calling a peer method as a client's (PERMISSION_DENIED), no credentials UNAUTHENTICATED", async () => {
    // Over TLS without a certificate (no client CA asks for one), naming a node as cairn-peer.
    const call = (metadata: Record<string, string>) =>
      rawCall(
        server.rpc,
        "/cairn.v1.Raft/ReadIndex",
        Buffer.alloc(0),
        { "cairn-peer": "n2", ...metadata },
        credentials.createSsl(readFileSync(certs.ca)),
      );
    const admin = await call({ authorization: `Bearer ${ADMIN_TOKEN}` });
    assert.ok(!admin.ok);
    assert.equal(admin.err.code, 7, admin.err.details); // PERMISSION_DENIED
    assert.match(admin.err.details, /client "root" \(role admin, by token\)/);
    const unknown = await call({ authorization: "Bearer not-a-listed-token-5e1f" });
    assert.ok(!unknown.ok);
    assert.equal(unknown.err.code, 16, unknown.err.details); // UNAUTHENTICATED
    assert.match(unknown.err.details, /does not list/);
    const none = await call({});
    assert.ok(!none.ok);
    assert.equal(none.err.code, 16, none.err.details);
    assert.match(none.err.details, /presented no certificate/);
    // Unharmed: a token's client calls are served.
    const writer = new CairnClient({
      endpoints: [server.rpc],
      timeoutMs: 3000,
      routing: false,
      channelOptions: CHANNEL,
      tls: { ca: readFileSync(certs.ca) },
      token: WRITE_TOKEN,
    });
    try {
      await eventually("the cluster founded, a Put served", async () => {
        await writer.put("peer-tokens/a", "one");
        return true;
      });
      assert.equal(await writer.getString("peer-tokens/a"), "one");
    } finally {
      writer.close();
    }
    assert.equal(server.proc.exitCode, null, "the node serves on");
  });
});

describe("the node's certificate rotated under load (mutual TLS, two shard workers)", () => {
  it("keeps every call succeeding while new connections get the new certificate", async () => {
    const certs = makeCerts(join(dir, "rotate"));
    // The live files, so that the replacement is a rename over them.
    const live = join(dir, "rotate-live");
    mkdirSync(live);
    const cert = join(live, "node.crt");
    const key = join(live, "node.key");
    copyFileSync(certs.nodeCert, cert);
    copyFileSync(certs.nodeKey, key);
    const server = await startServer({
      dataDir: join(dir, "rotate-data"),
      env: {
        CAIRN_TLS_CERT_FILE: cert,
        CAIRN_TLS_KEY_FILE: key,
        CAIRN_TLS_CLIENT_CA_FILE: certs.ca,
        CAIRN_SHARD_WORKERS: "2",
      },
    });
    const tls = {
      ca: readFileSync(certs.ca),
      cert: readFileSync(certs.clientCert),
      key: readFileSync(certs.clientKey),
    };
    const serialNow = (): Promise<string> =>
      new Promise((resolve, reject) => {
        const i = server.rpc.lastIndexOf(":");
        const s = tlsConnect(
          {
            host: server.rpc.slice(0, i),
            port: Number(server.rpc.slice(i + 1)),
            servername: "localhost",
            ca: tls.ca,
            cert: tls.cert,
            key: tls.key,
            ALPNProtocols: ["h2"],
          },
          () => {
            resolve(s.getPeerCertificate().serialNumber);
            s.destroy();
          },
        );
        s.once("error", reject);
      });
    try {
      const firstSerial = await serialNow();
      // The new certificate, of the same CA, made beside it.
      const next = join(dir, "rotate-next");
      mkdirSync(next);
      copyFileSync(certs.ca, join(next, "ca.crt"));
      const made = certCommand([
        "create-node",
        "n1",
        "--host",
        "127.0.0.1",
        "--host",
        "localhost",
        "--certs-dir",
        next,
        "--ca-key",
        join(certs.dir, "ca.key"),
      ]);
      assert.equal(made.code, 0, made.err);
      const nextSerial = new X509Certificate(readFileSync(join(next, "node.crt"))).serialNumber;

      let calls = 0;
      const failures: string[] = [];
      let stop = false;
      const worker = async (w: number, fresh: boolean): Promise<void> => {
        for (let i = 0; !stop && i < 100_000; i++) {
          // A fresh client (a new connection) each round, or one long-lived connection.
          const client = new CairnClient({
            endpoints: [server.rpc],
            timeoutMs: 5000,
            routing: false,
            channelOptions: CHANNEL,
            tls,
          });
          try {
            for (let j = 0; !stop && j < (fresh ? 1 : 100_000); j++) {
              const k = `rot/${w}/${i}/${j % 50}`;
              await client.put(k, "v");
              await client.get(k);
              calls += 2;
            }
          } catch (err) {
            failures.push(String(err));
          } finally {
            client.close();
          }
        }
      };
      const load = [0, 1, 2, 3].map((w) => worker(w, w >= 2));
      const t0 = performance.now();
      await eventually("calls under way", async () => calls > 200, 10_000);
      const t1 = performance.now();
      // Key then certificate, each by a rename (a pair that does not match in between is
      // refused and the files before kept).
      renameSync(join(next, "node.key"), key);
      renameSync(join(next, "node.crt"), cert);
      await eventually(
        "new connections get the new certificate",
        async () =>
          (await Promise.all([serialNow(), serialNow(), serialNow(), serialNow()])).every(
            (s) => s === nextSerial,
          ),
        15_000,
      );
      const t2 = performance.now();
      const at = calls;
      await eventually("calls go on after the rotation", async () => calls > at + 200, 10_000);
      stop = true;
      await Promise.all(load);
      console.log(
        `rotation: ${calls} calls; under way ${Math.round(t1 - t0)} ms, new certificate seen ${Math.round(t2 - t1)} ms after the rename`,
      );
      assert.notEqual(firstSerial, nextSerial);
      assert.deepEqual(failures, [], `${failures.length} of ${calls} calls failed`);
      assert.ok(server.lines.some((l) => l.includes("the TLS files changed and were reloaded")));
    } finally {
      await server.stop();
    }
  });
});
