/**
 * Certificates for the TLS tests, made as an operator makes them (`cairn cert`, run in this
 * process), plus what the tool never makes on purpose: a client certificate that has expired
 * (`openssl ca` with dates in the past).
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { cert } from "../../src/cli/cert-commands.ts";
import { type CliRun, runInProcess } from "./cli-run.ts";

/**
 * Runs `cairn cert ARGS` in this process, with the process's environment: synchronously, as the
 * command is.
 */
export function certCommand(args: readonly string[]): CliRun {
  return runInProcess(cert, args, { env: process.env });
}

function must(args: readonly string[]): void {
  const r = certCommand(args);
  if (r.code !== 0) throw new Error(`cairn cert ${args.join(" ")}: ${r.err}`);
}

export interface CertSet {
  readonly dir: string;
  readonly ca: string;
  readonly nodeCert: string;
  readonly nodeKey: string;
  readonly clientCert: string;
  readonly clientKey: string;
}

/** A CA, a node certificate for 127.0.0.1 and localhost, and client `alice`, in `dir`. */
export function makeCerts(dir: string): CertSet {
  must(["create-ca", "--certs-dir", dir]);
  must(["create-node", "n1", "--host", "127.0.0.1", "--host", "localhost", "--certs-dir", dir]);
  must(["create-client", "alice", "--certs-dir", dir]);
  return {
    dir,
    ca: join(dir, "ca.crt"),
    nodeCert: join(dir, "node.crt"),
    nodeKey: join(dir, "node.key"),
    clientCert: join(dir, "client.alice.crt"),
    clientKey: join(dir, "client.alice.key"),
  };
}

/** Node `id`'s certificate (for 127.0.0.1 and localhost) by the CA in `dir`, as <id>.crt, <id>.key there. */
export function nodeCert(dir: string, id: string): { cert: string; key: string } {
  must(["create-node", id, "--host", "127.0.0.1", "--host", "localhost", "--certs-dir", dir]);
  renameSync(join(dir, "node.crt"), join(dir, `${id}.crt`));
  renameSync(join(dir, "node.key"), join(dir, `${id}.key`));
  return { cert: join(dir, `${id}.crt`), key: join(dir, `${id}.key`) };
}

/** A cluster's certificates: the peers' CA and its nodes', the clients' CA and admin alice's. */
export interface ClusterCerts {
  /** The peers' CA (tls.peer_ca_file); it also signed the nodes' certificates clients check. */
  readonly peerCa: string;
  readonly clientCa: string;
  readonly nodes: ReadonlyMap<string, { readonly cert: string; readonly key: string }>;
  readonly alice: { readonly cert: string; readonly key: string };
  /** cluster.gossip_key_file: one key (`cairn cert create-gossip-key`), the same for every node. */
  readonly gossipKey: string;
}

/**
 * The peers' CA in `dir`/peers with a certificate for each of `ids`; the clients' in `dir`/clients;
 * a gossip key in `dir`/peers/gossip.key.
 */
export function clusterCerts(dir: string, ids: readonly string[]): ClusterCerts {
  const peers = join(dir, "peers");
  const clients = join(dir, "clients");
  must(["create-ca", "--certs-dir", peers]);
  must(["create-ca", "--certs-dir", clients]);
  must(["create-client", "alice", "--role", "admin", "--certs-dir", clients]);
  must(["create-gossip-key", "--certs-dir", peers]);
  return {
    gossipKey: join(peers, "gossip.key"),
    peerCa: join(peers, "ca.crt"),
    clientCa: join(clients, "ca.crt"),
    nodes: new Map(ids.map((id) => [id, nodeCert(peers, id)])),
    alice: { cert: join(clients, "client.alice.crt"), key: join(clients, "client.alice.key") },
  };
}

function openssl(args: readonly string[], cwd: string): void {
  const r = spawnSync("openssl", args, { cwd, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`openssl ${args.join(" ")}: ${r.stderr}`);
}

/**
 * Signs the request `req.csr` in `work` with the CA of `certs` (`openssl ca`: it takes any dates)
 * into `crt`, valid from `start` to `end` (ASN.1 times, `YYYYMMDDHHMMSSZ`).
 */
function signWithCa(certs: CertSet, work: string, crt: string, start: string, end: string): void {
  writeFileSync(
    join(work, "ca.cnf"),
    [
      "[ca]",
      "default_ca = test",
      "[test]",
      "database = index.txt",
      "new_certs_dir = .",
      "serial = serial",
      "default_md = sha256",
      "policy = any",
      "unique_subject = no",
      "[any]",
      "commonName = supplied",
      "",
    ].join("\n"),
  );
  writeFileSync(join(work, "index.txt"), "");
  writeFileSync(join(work, "serial"), "01\n");
  openssl(
    [
      "ca",
      "-batch",
      "-config",
      "ca.cnf",
      "-cert",
      certs.ca,
      "-keyfile",
      join(certs.dir, "ca.key"),
      "-in",
      "req.csr",
      "-out",
      crt,
      "-startdate",
      start,
      "-enddate",
      end,
      "-notext",
    ],
    work,
  );
}

/**
 * A certificate and key signed by the CA of `certs`, valid only on 1 January 2020: written as
 * `expired.crt` and `expired.key` in `dir`, with CN `name`.
 */
export function expiredCert(
  certs: CertSet,
  dir: string,
  name: string,
): { cert: string; key: string } {
  const work = join(dir, "expired-ca");
  mkdirSync(work, { recursive: true });
  const key = join(dir, "expired.key");
  const crt = join(dir, "expired.crt");
  openssl(
    ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key],
    work,
  );
  openssl(["req", "-new", "-key", key, "-subj", `/CN=${name}`, "-out", "req.csr"], work);
  signWithCa(certs, work, crt, "20200101000000Z", "20200102000000Z");
  return { cert: crt, key };
}

/**
 * A client certificate with an empty subject, named only by its subject alternative name `uri`
 * (as SPIFFE's and some service meshes' are), signed by the CA of `certs`: `san-only.crt` and
 * `san-only.key` in `dir`.
 */
export function sanOnlyClientCert(
  certs: Pick<CertSet, "ca" | "dir">,
  dir: string,
  uri: string,
): { cert: string; key: string } {
  return sanOnlyCert(certs, dir, [["URI", uri]]);
}

/**
 * A client certificate with an empty subject and the subject alternative names `sans`, each an
 * openssl type and its value as the certificate holds it (`["DNS", "a,b"]`, `["email", "x"]`,
 * `["otherName", "1.3.6.1.5.5.7.8.5;UTF8:x"]`), signed by the CA of `certs`: `san-only.crt` and
 * `san-only.key` in `dir`. Any value: each is written in a section of openssl's configuration
 * (`subjectAltName = @alt`, not on the line, where a comma would start another name), every
 * character but a letter or a digit behind a backslash, so that a quote, a `#` or a `$` is the
 * character itself, not openssl's syntax.
 */
export function sanOnlyCert(
  certs: Pick<CertSet, "ca" | "dir">,
  dir: string,
  sans: readonly (readonly [type: string, value: string])[],
): { cert: string; key: string } {
  mkdirSync(dir, { recursive: true });
  const key = join(dir, "san-only.key");
  const crt = join(dir, "san-only.crt");
  writeFileSync(
    join(dir, "san-only.cnf"),
    [
      "[v3]",
      "basicConstraints = critical, CA:FALSE",
      "keyUsage = critical, digitalSignature",
      "extendedKeyUsage = clientAuth",
      "subjectAltName = @alt",
      "[alt]",
      ...sans.map(
        ([type, value], i) => `${type}.${i + 1} = ${value.replace(/[^A-Za-z0-9]/g, "\\$&")}`,
      ),
      "",
    ].join("\n"),
  );
  openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key], dir);
  openssl(["req", "-new", "-key", key, "-subj", "/", "-out", "san-only.csr"], dir);
  openssl(
    [
      ...["x509", "-req", "-in", "san-only.csr", "-CA", certs.ca],
      ...["-CAkey", join(certs.dir, "ca.key"), "-set_serial", "7", "-days", "2"],
      ...["-extfile", "san-only.cnf", "-extensions", "v3", "-out", crt],
    ],
    dir,
  );
  return { cert: crt, key };
}

/**
 * A certificate for the node key of `certs` (CN n1), signed by its CA, valid from `from` for a
 * day: a renewal issued on a host whose clock is ahead. Written as `future.crt` in `dir`.
 */
export function certValidFrom(certs: CertSet, dir: string, from: Date): string {
  const work = join(dir, "future-ca");
  mkdirSync(work, { recursive: true });
  const asn1 = (d: Date): string => `${d.toISOString().replace(/[-:T]/g, "").slice(0, 14)}Z`;
  const crt = join(dir, "future.crt");
  openssl(["req", "-new", "-key", certs.nodeKey, "-subj", "/CN=n1", "-out", "req.csr"], work);
  signWithCa(certs, work, crt, asn1(from), asn1(new Date(from.getTime() + 86_400_000)));
  return crt;
}

export function read(path: string): Buffer {
  return readFileSync(path);
}

/** The peer calls node `http` (its HTTP address) refused for their certificate, from /metrics. */
export async function refusedCertificates(http: string | undefined): Promise<number> {
  const text = await (await fetch(`http://${http}/metrics`)).text();
  const line = text
    .split("\n")
    .find((l) => l.startsWith('cairn_raft_peer_calls_refused_total{reason="certificate"'));
  return line === undefined ? 0 : Number(line.split(" ").pop());
}
