/**
 * auth.tokens_file (src/config/load.ts checkAuth, src/common/auth-tokens.ts): its three forms,
 * a bad file refused at start naming the entry (never a token), and tokens refused in cleartext
 * off loopback.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { loadConfig } from "../../src/config/index.ts";
import { makeCerts } from "../support/tls-certs.ts";
import { configRefusal } from "../support/config-refusal.ts";

const dir = mkdtempSync(join(tmpdir(), "cairn-auth-config-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const good = join(dir, "tokens.yaml");
writeFileSync(good, "tokens:\n  - {name: ci, role: readwrite, token: ci-token-0123456789abc}\n");

describe("auth.tokens_file configuration", () => {
  it("is unset by default, and taken from YAML, the environment and the flag", () => {
    assert.equal(loadConfig({ env: {} }).auth.tokens_file, undefined);
    const yaml = join(dir, "c.yaml");
    writeFileSync(yaml, `auth:\n  tokens_file: ${good}\n`);
    assert.equal(loadConfig({ env: {}, configPath: yaml }).auth.tokens_file, good);
    assert.equal(loadConfig({ env: { CAIRN_AUTH_TOKENS_FILE: good } }).auth.tokens_file, good);
    assert.equal(
      loadConfig({ env: {}, flags: { "auth-tokens-file": good } }).auth.tokens_file,
      good,
    );
  });

  it("refuses a file that cannot be used, naming the entry and never the token", () => {
    const bad = join(dir, "bad.yaml");
    writeFileSync(bad, "tokens:\n  - {name: ci, role: root, token: secret-0123456789abcdef}\n");
    const message = configRefusal({ CAIRN_AUTH_TOKENS_FILE: bad });
    assert.match(
      message,
      /auth\.tokens_file \(from env CAIRN_AUTH_TOKENS_FILE\).*tokens\[0\] \(ci\): role/,
    );
    assert.ok(!message.includes("secret-0123456789abcdef"));
    assert.match(
      configRefusal({ CAIRN_AUTH_TOKENS_FILE: join(dir, "missing.yaml") }),
      /cannot be read: ENOENT/,
    );
  });

  it("refuses a file larger than 1 MiB, and a device with no end, unread", () => {
    // Read whole, /dev/zero (a typo, a hostile mount) was read until the memory ran out; it is
    // no regular file, which a file read again when it changes must be.
    assert.match(
      configRefusal({ CAIRN_AUTH_TOKENS_FILE: "/dev/zero" }),
      /auth\.tokens_file \(from env CAIRN_AUTH_TOKENS_FILE\): \/dev\/zero: is not a regular file \(a character device\)/,
    );
    const big = join(dir, "big.yaml");
    writeFileSync(big, `${readFileSync(good, "utf8")}${"#".repeat(1024 * 1024)}\n`);
    assert.match(
      configRefusal({ CAIRN_AUTH_TOKENS_FILE: big }),
      /auth\.tokens_file .*big\.yaml: is larger than 1 MiB/,
    );
  });

  it("refuses tokens in cleartext off loopback, and accepts them over TLS", () => {
    assert.match(
      configRefusal({
        CAIRN_AUTH_TOKENS_FILE: good,
        CAIRN_RPC_ADDR: "0.0.0.0:7447",
        CAIRN_ADVERTISE_RPC_ADDR: "10.0.0.5:7447",
      }),
      /auth\.tokens_file .*cleartext: set tls\.cert_file/,
    );
    const certs = makeCerts(join(dir, "certs"));
    const c = loadConfig({
      env: {
        CAIRN_AUTH_TOKENS_FILE: good,
        CAIRN_RPC_ADDR: "0.0.0.0:7447",
        CAIRN_ADVERTISE_RPC_ADDR: "10.0.0.5:7447",
        CAIRN_TLS_CERT_FILE: certs.nodeCert,
        CAIRN_TLS_KEY_FILE: certs.nodeKey,
      },
    });
    assert.equal(c.auth.tokens_file, good);
    // The IPv4-mapped loopback address is loopback too: it was refused as off the host.
    for (const host of ["127.0.0.1", "[::1]", "localhost", "[::ffff:127.0.0.1]"]) {
      assert.equal(
        loadConfig({ env: { CAIRN_AUTH_TOKENS_FILE: good, CAIRN_RPC_ADDR: `${host}:7447` } }).auth
          .tokens_file,
        good,
      );
    }
  });
});
