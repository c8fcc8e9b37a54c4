/**
 * A first seed asks its other seeds whether a cluster runs there before it founds one
 * (ClusterState.bootstrapLoop, #seedWithClusterId, probeMember). Over TLS a peer's certificate
 * must name the node id dialed, and a seed that gossip has not shown yet has no known id: it
 * was dialed as its address, which no certificate names, so it never answered and the founding
 * went ahead without it. Now such a seed is asked with any certificate the peer CA signed; one
 * another CA signed still gets no answer. Real TLS over loopback, certificates by `cairn cert`.
 */
import assert from "node:assert/strict";
import { mkdtempSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { RpcServer } from "../../src/api/index.ts";
import { ClusterViewPublisher } from "../../src/cluster/index.ts";
import { PeerTls } from "../../src/common/peer-tls.ts";
import { probeMember } from "../../src/node/cluster.ts";
import { CairnMetrics, silentLogger } from "../../src/ops/index.ts";
import { FollowerStore, LIMITS, TOTAL_SHARDS } from "../api/forward-support.ts";
import { certCommand } from "../support/tls-certs.ts";

const dir = mkdtempSync(join(tmpdir(), "cairn-seed-probe-tls-"));

function must(args: readonly string[]): void {
  const r = certCommand(args);
  if (r.code !== 0) throw new Error(`cairn cert ${args.join(" ")}: ${r.err}`);
}

/** Node `id`'s certificate and key in `certs` (its CA's directory), as `cairn cert` makes them. */
function nodeCert(certs: string, id: string): { certFile: string; keyFile: string } {
  must(["create-node", id, "--host", "127.0.0.1", "--certs-dir", certs]);
  const files = { certFile: join(certs, `${id}.crt`), keyFile: join(certs, `${id}.key`) };
  renameSync(join(certs, "node.crt"), files.certFile);
  renameSync(join(certs, "node.key"), files.keyFile);
  return files;
}

let server: RpcServer;
let address: string;
const tlsOf: PeerTls[] = [];

before(async () => {
  const peers = join(dir, "peers");
  const others = join(dir, "others");
  must(["create-ca", "--certs-dir", peers]);
  must(["create-ca", "--certs-dir", others]);
  const n1 = nodeCert(peers, "n1");
  const views = new ClusterViewPublisher(TOTAL_SHARDS, { minIntervalMs: 0 });
  views.setClusterId("cluster-a");
  views.setIncarnation("inc-1");
  server = new RpcServer({
    address: "127.0.0.1:0",
    nodeId: "n1",
    store: new FollowerStore("n2"),
    metrics: new CairnMetrics({ nodeId: "n1" }),
    views,
    logger: silentLogger,
    limits: LIMITS,
    maxMessageBytes: 4 * 1024 * 1024,
    tls: { ...n1, peerCaFile: join(peers, "ca.crt") },
  });
  address = `127.0.0.1:${(await server.start()).port}`;
  // The node asking (n2), and one whose CA is another cluster's.
  tlsOf.push(new PeerTls({ ...nodeCert(peers, "n2"), peerCaFile: join(peers, "ca.crt") }));
  tlsOf.push(new PeerTls({ ...nodeCert(others, "x1"), peerCaFile: join(others, "ca.crt") }));
});

after(async () => {
  for (const t of tlsOf) t.close();
  await server.close(1000);
  rmSync(dir, { recursive: true, force: true });
});

describe("probeMember over TLS", () => {
  it("asks a seed whose node id is not known with any certificate the peer CA signed", async () => {
    const [n2] = tlsOf;
    const answer = await probeMember(address, null, n2);
    assert.equal(answer?.clusterId, "cluster-a", "the seed's cluster id");
    // Dialed as its address (what the first seed did): no certificate names it.
    assert.equal(await probeMember(address, address, n2), undefined);
    // Its known id still holds the certificate to it.
    assert.equal((await probeMember(address, "n1", n2))?.clusterId, "cluster-a");
    assert.equal(await probeMember(address, "n3", n2), undefined);
  });

  it("gets no answer from a node another CA signed", async () => {
    const [, x1] = tlsOf;
    assert.equal(await probeMember(address, null, x1), undefined);
  });
});
