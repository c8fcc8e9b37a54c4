/**
 * The tls.* keys (src/config/load.ts checkTls, src/common/tls-files.ts): their YAML, flag and
 * environment forms, and the start-up checks, each refusal naming the key and the file.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { loadConfig } from "../../src/config/index.ts";
import { expiredCert, makeCerts } from "../support/tls-certs.ts";
import { configRefusal } from "../support/config-refusal.ts";

const dir = mkdtempSync(join(tmpdir(), "cairn-tls-config-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const certs = makeCerts(join(dir, "certs"));
const other = makeCerts(join(dir, "other"));

/** The message of the ConfigError `env` makes loadConfig throw. */
const TLS_ENV = { CAIRN_TLS_CERT_FILE: certs.nodeCert, CAIRN_TLS_KEY_FILE: certs.nodeKey };

describe("tls.* configuration", () => {
  it("is off by default: no key set", () => {
    const c = loadConfig({ env: {} });
    assert.deepEqual(
      { ...c.tls },
      {
        cert_file: undefined,
        key_file: undefined,
        client_ca_file: undefined,
        peer_ca_file: undefined,
      },
    );
  });

  it("takes the files from YAML, the environment and flags", () => {
    const yaml = join(dir, "tls.yaml");
    writeFileSync(
      yaml,
      `tls:\n  cert_file: ${certs.nodeCert}\n  key_file: ${certs.nodeKey}\n  client_ca_file: ${certs.ca}\n`,
    );
    const fromFile = loadConfig({ env: {}, configPath: yaml });
    assert.equal(fromFile.tls.cert_file, certs.nodeCert);
    assert.equal(fromFile.tls.client_ca_file, certs.ca);
    const fromEnv = loadConfig({ env: { ...TLS_ENV, CAIRN_TLS_CLIENT_CA_FILE: certs.ca } });
    assert.equal(fromEnv.tls.key_file, certs.nodeKey);
    assert.equal(fromEnv.tls.client_ca_file, certs.ca);
    const fromFlags = loadConfig({
      env: {},
      flags: { "tls-cert-file": certs.nodeCert, "tls-key-file": certs.nodeKey },
    });
    assert.equal(fromFlags.tls.cert_file, certs.nodeCert);
  });

  it("refuses a certificate without its key, and a key without its certificate", () => {
    assert.match(
      configRefusal({ CAIRN_TLS_CERT_FILE: certs.nodeCert }),
      /tls\.key_file .*must be set with tls\.cert_file \(from env CAIRN_TLS_CERT_FILE\)/,
    );
    assert.match(
      configRefusal({}, { "tls-key-file": certs.nodeKey }),
      /tls\.cert_file .*must be set with tls\.key_file \(from flag --tls-key-file\)/,
    );
  });

  it("refuses a file it cannot read, naming the key and the file", () => {
    const missing = join(dir, "nope.crt");
    assert.match(
      configRefusal({ ...TLS_ENV, CAIRN_TLS_CERT_FILE: missing }),
      new RegExp(
        `tls\\.cert_file \\(from env CAIRN_TLS_CERT_FILE\\): ${missing}: cannot be read: ENOENT`,
      ),
    );
    assert.match(
      configRefusal({ ...TLS_ENV, CAIRN_TLS_CLIENT_CA_FILE: missing }),
      /tls\.client_ca_file .*nope\.crt: cannot be read: ENOENT/,
    );
  });

  it("refuses a file larger than 4 MiB, and a device with no end, unread", () => {
    // Read whole, /dev/zero (a typo, a hostile mount) was read until the memory ran out; it is
    // no regular file, which a file read again when it changes must be.
    assert.match(
      configRefusal({ ...TLS_ENV, CAIRN_TLS_CERT_FILE: "/dev/zero" }),
      /tls\.cert_file \(from env CAIRN_TLS_CERT_FILE\): \/dev\/zero: is not a regular file \(a character device\)/,
    );
    assert.match(
      configRefusal({ ...TLS_ENV, CAIRN_TLS_KEY_FILE: "/dev/zero" }),
      /tls\.key_file \(from env CAIRN_TLS_KEY_FILE\): \/dev\/zero: is not a regular file \(a character device\)/,
    );
    // A CA bundle padded past the bound (text around PEM blocks is allowed, and was read).
    const big = join(dir, "big-ca.crt");
    writeFileSync(big, `${"#".repeat(4 * 1024 * 1024)}\n${readFileSync(certs.ca, "utf8")}`);
    assert.match(
      configRefusal({ ...TLS_ENV, CAIRN_TLS_CLIENT_CA_FILE: big }),
      /tls\.client_ca_file \(from env CAIRN_TLS_CLIENT_CA_FILE\): .*big-ca\.crt: is larger than 4 MiB/,
    );
  });

  it("refuses a file that is not PEM", () => {
    const junk = join(dir, "junk.pem");
    writeFileSync(junk, "not a certificate\n");
    assert.match(
      configRefusal({ ...TLS_ENV, CAIRN_TLS_CERT_FILE: junk }),
      /tls\.cert_file .*junk\.pem: holds no PEM certificate/,
    );
    assert.match(
      configRefusal({ ...TLS_ENV, CAIRN_TLS_KEY_FILE: junk }),
      /tls\.key_file .*junk\.pem: is not an unencrypted PEM private key/,
    );
  });

  it("refuses a key that is not the certificate's", () => {
    const message = configRefusal({ ...TLS_ENV, CAIRN_TLS_KEY_FILE: other.nodeKey });
    assert.match(message, /tls\.key_file \(from env CAIRN_TLS_KEY_FILE\)/);
    assert.ok(message.includes(other.nodeKey), message);
    assert.ok(
      message.includes(`is not the key of the certificate in tls.cert_file (${certs.nodeCert})`),
      message,
    );
  });

  it("refuses an expired certificate, saying when it expired", () => {
    const old = expiredCert(certs, join(dir, "expired"), "n1");
    const message = configRefusal({ CAIRN_TLS_CERT_FILE: old.cert, CAIRN_TLS_KEY_FILE: old.key });
    assert.match(
      message,
      /tls\.cert_file .*expired\.crt: its certificate \(CN=n1\) expired on 2020-01-02T00:00:00\.000Z/,
    );
  });

  it("refuses a client CA without a certificate to serve TLS with", () => {
    assert.match(
      configRefusal({ CAIRN_TLS_CLIENT_CA_FILE: certs.ca }),
      /tls\.client_ca_file .*needs tls\.cert_file and tls\.key_file/,
    );
  });

  it("in a cluster, wants the peer CA with TLS; takes it there, and not without a certificate", () => {
    assert.match(
      configRefusal({ ...TLS_ENV, CAIRN_SEED_NODES: "127.0.0.2:7447" }),
      /tls\.peer_ca_file .*must be set in a cluster with TLS .*cluster\.seed_nodes from env CAIRN_SEED_NODES/,
    );
    const c = loadConfig({
      env: { ...TLS_ENV, CAIRN_SEED_NODES: "127.0.0.2:7447", CAIRN_TLS_PEER_CA_FILE: certs.ca },
    });
    assert.equal(c.tls.peer_ca_file, certs.ca);
    assert.match(
      configRefusal({ CAIRN_TLS_PEER_CA_FILE: certs.ca, CAIRN_SEED_NODES: "127.0.0.2:7447" }),
      /tls\.peer_ca_file \(from env CAIRN_TLS_PEER_CA_FILE\): needs tls\.cert_file and tls\.key_file/,
    );
    assert.match(
      configRefusal({ ...TLS_ENV, CAIRN_TLS_PEER_CA_FILE: join(dir, "missing.crt") }),
      /tls\.peer_ca_file \(from env CAIRN_TLS_PEER_CA_FILE\): .*missing\.crt: cannot be read: ENOENT/,
    );
  });

  it("accepts a chain: the certificate file may hold the CA after the node's certificate", () => {
    const chain = join(dir, "chain.crt");
    writeFileSync(chain, Buffer.concat([readFileSync(certs.nodeCert), readFileSync(certs.ca)]));
    const c = loadConfig({ env: { ...TLS_ENV, CAIRN_TLS_CERT_FILE: chain } });
    assert.equal(c.tls.cert_file, chain);
  });
});
