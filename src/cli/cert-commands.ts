/**
 * `cairn cert create-ca | create-node ID --host H... | create-client NAME | create-gossip-key`:
 * the certificates of TLS and mutual TLS (docs/operations.md, "Security"), made with the
 * `openssl` binary in a certificates directory, as `cockroach cert` does, and the key that seals
 * SWIM's gossip (made with node:crypto):
 *
 *   ca.crt, ca.key                  the CA (keep ca.key off the nodes)
 *   node.crt, node.key              a node: CN = its node id (when at most 64 characters), the
 *                                   id and the --host names and addresses as subject
 *                                   alternative names, for server and client use (its peers
 *                                   check the id: src/common/peer-tls.ts)
 *   client.NAME.crt, client.NAME.key  a client: CN = NAME (at most 64 characters), OU = its
 *                                   role (--role), for client use
 *   gossip.key                      cluster.gossip_key_file: one random key (src/common/gossip-keys.ts)
 *
 * Keys are ECDSA P-256, written 0600; an existing file is never overwritten without --overwrite.
 */
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { isIP } from "node:net";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { parseArgs } from "node:util";
import { isRole } from "../common/auth-tokens.ts";
import { GOSSIP_KEY_BYTES } from "../common/gossip-keys.ts";
import { type CommandOptions, EXIT, UsageError } from "./common.ts";
import type { Io } from "./io.ts";

export const CERT_HELP = `Usage: cairn cert <create-ca | create-node ID --host HOST... | create-client NAME | create-gossip-key> [options]

Creates TLS certificates with the openssl binary (on the PATH) in a certificates directory, and
the key that seals the nodes' gossip:

  create-ca                 ca.crt and ca.key: the CA that signs the others (keep ca.key safe,
                            off the nodes)
  create-node ID            node.crt and node.key for node ID (a DNS name, which its peers
                            check, and its CN when at most 64 characters, X.509's bound), valid
                            for every --host (a DNS name or an IP address; give each name
                            clients dial); one directory per node, or move the files away
                            before the next
  create-client NAME        client.NAME.crt and client.NAME.key (CN NAME, at most 64
                            characters; OU its --role), for mutual TLS
  create-gossip-key         gossip.key: a new random key for cluster.gossip_key_file (the same
                            file on every node; to rotate, list a second key: docs/operations.md)

Options:
  --certs-dir DIR   where the files go (default certs); created if missing
  --ca-key FILE     the CA's key (default DIR/ca.key; create-ca writes it there)
  --ca-cert FILE    the CA's certificate (default DIR/ca.crt; create-ca writes it there)
  --host HOST       create-node: a name or address the node is reached at (repeat; at least one)
  --days N          validity in days (default 3650 for the CA, 365 for the others)
  --role ROLE       create-client: what the client may call, written as the certificate's OU:
                    read (Get, Scan, WatchCluster), readwrite (also Put, Delete; the default)
                    or admin (also every Admin call)
  --overwrite       replace existing files
  -h, --help        show this help

A node serves TLS with tls.cert_file DIR/node.crt and tls.key_file DIR/node.key; with
tls.client_ca_file DIR/ca.crt it asks clients for a certificate (mutual TLS), and with
cluster.gossip_key_file DIR/gossip.key it seals its gossip. Clients:
cairn --cacert DIR/ca.crt [--cert DIR/client.NAME.crt --key DIR/client.NAME.key] ...

Examples:
  cairn cert create-ca --certs-dir certs
  cairn cert create-node n1 --host localhost --host 127.0.0.1 --certs-dir certs
  cairn cert create-client alice --certs-dir certs
  cairn cert create-gossip-key --certs-dir certs
`;

/** The comment a new gossip key file starts with. */
const GOSSIP_KEY_FILE_HEADER =
  "# cluster.gossip_key_file: the first key seals what a node sends, every key opens what it\n" +
  "# receives. To rotate: add a new key (cairn cert create-gossip-key) as a second line on every\n" +
  "# node, then move it first on every node, then remove the old one.\n";

class CertError extends Error {}

function openssl(args: readonly string[], input?: string): string {
  const r = spawnSync("openssl", args, { encoding: "utf8", input });
  if (r.error !== undefined) {
    const code = (r.error as NodeJS.ErrnoException).code;
    throw new CertError(
      code === "ENOENT"
        ? "the openssl binary is not on the PATH: install OpenSSL (e.g. apt-get install openssl) and try again"
        : `cannot run openssl: ${r.error.message}`,
    );
  }
  if (r.status !== 0) {
    throw new CertError(`openssl ${args[0] ?? ""} failed: ${r.stderr.trim()}`);
  }
  return r.stdout;
}

/** A subject alternative name for `host`: an address or a DNS name. */
function sanOf(host: string): string {
  if (isIP(host) !== 0) return `IP:${host}`;
  if (!/^[A-Za-z0-9*]([A-Za-z0-9.-]{0,252})$/.test(host))
    throw new UsageError(`--host ${JSON.stringify(host)} is neither an IP address nor a DNS name`);
  return `DNS:${host}`;
}

/**
 * Writes `data` to `file` as a new file of `mode` beside it, renamed over it: an existing file is
 * replaced whole, never rewritten in place, so a key gets its 0600 even where the file it
 * replaces was readable by others (writeFileSync's mode applies only to a file it creates), and
 * a node watching the file never reads it half written.
 */
function writeReplacing(file: string, data: Buffer | string, mode: number): void {
  const temp = join(dirname(file), `.${basename(file)}.${randomBytes(6).toString("hex")}.tmp`);
  try {
    writeFileSync(temp, data, { mode, flag: "wx" });
    renameSync(temp, file);
  } catch (err) {
    rmSync(temp, { force: true });
    throw err;
  }
}

interface Files {
  readonly crt: string;
  readonly key: string;
}

function refuseExisting(files: Files, overwrite: boolean): void {
  if (overwrite) return;
  for (const f of [files.crt, files.key]) {
    if (existsSync(f)) throw new UsageError(`${f} exists; pass --overwrite to replace it`);
  }
}

/** A new key and a certificate for `subject`, signed by the CA (or self-signed when ca is null). */
function create(
  files: Files,
  subject: string,
  days: number,
  extensions: string,
  ca: Files | null,
): void {
  const work = mkdtempSync(join(tmpdir(), "cairn-cert-"));
  try {
    const ext = join(work, "ext.cnf");
    writeFileSync(ext, `[v3]\n${extensions}\n`);
    const key = join(work, "key.pem");
    const csr = join(work, "req.csr");
    const crt = join(work, "cert.pem");
    openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key]);
    openssl(["req", "-new", "-key", key, "-subj", subject, "-out", csr]);
    const serial = `0x${randomBytes(16).toString("hex")}`;
    const signer = ca === null ? ["-signkey", key] : ["-CA", ca.crt, "-CAkey", ca.key];
    openssl([
      "x509",
      "-req",
      "-in",
      csr,
      ...signer,
      "-set_serial",
      serial,
      "-days",
      String(days),
      "-sha256",
      "-extfile",
      ext,
      "-extensions",
      "v3",
      "-out",
      crt,
    ]);
    for (const f of [files.key, files.crt]) mkdirSync(dirname(f), { recursive: true });
    writeReplacing(files.key, readFileSync(key), 0o600);
    writeReplacing(files.crt, readFileSync(crt), 0o644);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

const CA_EXTENSIONS = [
  "basicConstraints = critical, CA:TRUE, pathlen:0",
  "keyUsage = critical, keyCertSign, cRLSign",
  "subjectKeyIdentifier = hash",
].join("\n");

function leafExtensions(usage: string, sans: readonly string[]): string {
  return [
    "basicConstraints = critical, CA:FALSE",
    "keyUsage = critical, digitalSignature, keyEncipherment",
    `extendedKeyUsage = ${usage}`,
    "subjectKeyIdentifier = hash",
    "authorityKeyIdentifier = keyid",
    ...(sans.length === 0 ? [] : [`subjectAltName = ${sans.join(", ")}`]),
  ].join("\n");
}

/** The longest common name X.509 allows (ub-common-name); openssl refuses a longer one. */
const MAX_COMMON_NAME = 64;

/**
 * A name for a subject, of at most `max` characters: no character openssl's -subj would read as
 * syntax.
 */
function checkName(what: string, name: string | undefined, max: number): string {
  if (name === undefined) throw new UsageError(`missing ${what}`);
  if (!new RegExp(`^[A-Za-z0-9][A-Za-z0-9._-]{0,${max - 1}}$`).test(name))
    throw new UsageError(
      `${what} ${JSON.stringify(name)} must be 1 to ${max} letters, digits, '.', '_' or '-'`,
    );
  return name;
}

function daysOf(text: string | undefined, fallback: number): number {
  if (text === undefined) return fallback;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1 || n > 36500)
    throw new UsageError(`--days must be a whole number of days from 1 to 36500, not ${text}`);
  return n;
}

export function cert(argv: readonly string[], io: Io): number {
  try {
    const { values, positionals } = parseCertArgs(argv);
    if (values.help === true) {
      io.stdout.write(CERT_HELP);
      return EXIT.ok;
    }
    const [sub, name, ...extra] = positionals;
    if (extra.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(extra[0])}`);
    const dir = values["certs-dir"] ?? "certs";
    const ca: Files = {
      crt: values["ca-cert"] ?? join(dir, "ca.crt"),
      key: values["ca-key"] ?? join(dir, "ca.key"),
    };
    const overwrite = values.overwrite === true;
    const hosts = values.host ?? [];
    if (sub !== "create-node" && hosts.length > 0)
      throw new UsageError("--host is for create-node only");
    const role = values.role ?? "readwrite";
    if (sub !== "create-client" && values.role !== undefined)
      throw new UsageError("--role is for create-client only");
    if (!isRole(role))
      throw new UsageError(`--role must be read, readwrite or admin, not ${JSON.stringify(role)}`);
    let files: Files;
    switch (sub) {
      case "create-ca":
        if (name !== undefined) throw new UsageError(`unexpected argument ${JSON.stringify(name)}`);
        files = ca;
        refuseExisting(files, overwrite);
        // A name of its own, so that a certificate of another CA is told apart in errors.
        create(
          files,
          `/O=Cairn/CN=Cairn CA ${randomBytes(4).toString("hex")}`,
          daysOf(values.days, 3650),
          CA_EXTENSIONS,
          null,
        );
        break;
      case "create-node": {
        // Any node id the configuration takes (node_id: up to 128 characters).
        const id = checkName("the node ID", name, 128);
        if (hosts.length === 0)
          throw new UsageError("create-node needs at least one --host (a name or address)");
        // The node id as a name of its own (and its CN, when a CN can hold it): peers check it
        // when they dial this node (src/common/peer-tls.ts: the CN or a DNS or IP alternative
        // name), and this node's calls to them are taken as its.
        const sans = [...new Set([`DNS:${id}`, ...hosts.map(sanOf)])];
        files = { crt: join(dir, "node.crt"), key: join(dir, "node.key") };
        refuseExisting(files, overwrite);
        requireCa(ca);
        create(
          files,
          id.length <= MAX_COMMON_NAME ? `/O=Cairn/CN=${id}` : "/O=Cairn",
          daysOf(values.days, 365),
          leafExtensions("serverAuth, clientAuth", sans),
          ca,
        );
        break;
      }
      case "create-client": {
        // Its name is its CN (src/api/authz.ts certIdentity).
        const client = checkName("the client NAME", name, MAX_COMMON_NAME);
        files = { crt: join(dir, `client.${client}.crt`), key: join(dir, `client.${client}.key`) };
        refuseExisting(files, overwrite);
        requireCa(ca);
        create(
          files,
          `/O=Cairn/OU=${role}/CN=${client}`,
          daysOf(values.days, 365),
          leafExtensions("clientAuth", []),
          ca,
        );
        break;
      }
      case "create-gossip-key": {
        if (name !== undefined) throw new UsageError(`unexpected argument ${JSON.stringify(name)}`);
        if (values.days !== undefined) throw new UsageError("--days is for certificates only");
        const file = join(dir, "gossip.key");
        if (!overwrite && existsSync(file))
          throw new UsageError(`${file} exists; pass --overwrite to replace it`);
        mkdirSync(dir, { recursive: true });
        const key = randomBytes(GOSSIP_KEY_BYTES).toString("base64");
        writeReplacing(file, `${GOSSIP_KEY_FILE_HEADER}${key}\n`, 0o600);
        io.stdout.write(`wrote ${file}\n`);
        return EXIT.ok;
      }
      case undefined:
        throw new UsageError(
          "missing the subcommand: create-ca, create-node, create-client or create-gossip-key",
        );
      default:
        throw new UsageError(`unknown subcommand ${JSON.stringify(sub)}`);
    }
    io.stdout.write(`wrote ${files.crt} and ${files.key}\n`);
    return EXIT.ok;
  } catch (err) {
    if (err instanceof UsageError) {
      io.stderr.write(`cairn cert: ${err.message}\nRun 'cairn cert --help' for usage.\n`);
      return EXIT.usage;
    }
    if (err instanceof CertError) {
      io.stderr.write(`cairn cert: ${err.message}\n`);
      return EXIT.failed;
    }
    // A directory or file that cannot be made or written (--certs-dir under a file, no
    // permission, a full disk): said in one line, exit 5, as openssl's failures are. It escaped
    // with its stack, exit 1, which the client commands use for "not found".
    const failed = err as NodeJS.ErrnoException;
    if (failed instanceof Error && typeof failed.code === "string") {
      io.stderr.write(
        `cairn cert: cannot write ${failed.path ?? "the files"}: ${failed.message}\n`,
      );
      return EXIT.failed;
    }
    throw err;
  }
}

function requireCa(ca: Files): void {
  const what = [
    [ca.crt, "certificate", "--ca-cert"],
    [ca.key, "key", "--ca-key"],
  ] as const;
  for (const [file, part, flag] of what) {
    if (!existsSync(file))
      throw new UsageError(
        `the CA's ${part} ${file} does not exist: run 'cairn cert create-ca' first, or pass ${flag} FILE where it is kept`,
      );
  }
}

/** The flags CERT_HELP lists (cert takes no global flag: it reaches no node). */
export const CERT_OPTIONS = {
  "certs-dir": { type: "string" },
  "ca-key": { type: "string" },
  "ca-cert": { type: "string" },
  host: { type: "string", multiple: true },
  days: { type: "string" },
  role: { type: "string" },
  overwrite: { type: "boolean" },
  help: { type: "boolean", short: "h" },
} as const satisfies CommandOptions;

function parseCertArgs(argv: readonly string[]): {
  values: {
    help?: boolean;
    overwrite?: boolean;
    "certs-dir"?: string;
    "ca-key"?: string;
    "ca-cert"?: string;
    days?: string;
    host?: string[];
    role?: string;
  };
  positionals: string[];
} {
  try {
    return parseArgs({
      args: [...argv],
      options: CERT_OPTIONS,
      strict: true,
      allowPositionals: true,
    });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}
