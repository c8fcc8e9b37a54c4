/**
 * The access control core (src/api/authz.ts) and the tokens file (src/common/auth-tokens.ts):
 * every identity against every class of method, certificate subjects, and the file's format.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { describe, it } from "node:test";
import {
  ANONYMOUS,
  authorize,
  certIdentity,
  type Identity,
  type MethodClass,
  methodClassOf,
} from "../../src/api/authz.ts";
import { parseTokens, TokensFileError } from "../../src/common/auth-tokens.ts";

const client = (role: "read" | "readwrite" | "admin"): Identity => ({
  kind: "client",
  name: "c",
  role,
  via: "token",
});
const peer: Identity = { kind: "peer", name: "n2", via: "cert" };

describe("authorize", () => {
  it("answers each identity for each class of method as docs/operations.md says", () => {
    const classes: MethodClass[] = ["open", "read", "write", "admin", "peer"];
    // Expected: "ok", or the gRPC status of the refusal (16 UNAUTHENTICATED, 7 PERMISSION_DENIED).
    const table: [Identity, (string | number)[]][] = [
      [ANONYMOUS, ["ok", 16, 16, 16, "ok"]],
      [client("read"), ["ok", "ok", 7, 7, 7]],
      [client("readwrite"), ["ok", "ok", "ok", 7, 7]],
      [client("admin"), ["ok", "ok", "ok", "ok", 7]],
      [peer, ["ok", "ok", "ok", 7, "ok"]],
    ];
    for (const [who, row] of table) {
      classes.forEach((cls, i) => {
        const r = authorize(who, cls, "/x", true);
        assert.equal(r === null ? "ok" : r.code, row[i], `${JSON.stringify(who)} ${cls}`);
      });
    }
  });

  it("leaves client methods open when no authentication is configured, but never a peer's to a client", () => {
    for (const cls of ["open", "read", "write", "admin"] as const) {
      assert.equal(authorize(ANONYMOUS, cls, "/x", false), null);
    }
    assert.equal(authorize(client("admin"), "peer", "/cairn.v1.Raft/Stream", false)?.code, 7);
  });

  it("classes the methods, unknown ones as admin", () => {
    assert.equal(methodClassOf("/grpc.health.v1.Health/Check"), "open");
    assert.equal(methodClassOf("/cairn.v1.KV/Get"), "read");
    assert.equal(methodClassOf("/cairn.v1.KV/Scan"), "read");
    assert.equal(methodClassOf("/cairn.v1.Meta/WatchCluster"), "read");
    assert.equal(methodClassOf("/cairn.v1.KV/Put"), "write");
    assert.equal(methodClassOf("/cairn.v1.KV/Delete"), "write");
    assert.equal(methodClassOf("/cairn.v1.Admin/RemoveNode"), "admin");
    assert.equal(methodClassOf("/cairn.v1.Admin/RecommissionNode"), "admin");
    assert.equal(methodClassOf("/cairn.v1.Admin/GetNode"), "admin");
    assert.equal(methodClassOf("/cairn.v1.Raft/ReadIndex"), "peer");
    assert.equal(methodClassOf("/some.Other/Method"), "admin");
  });
});

describe("certIdentity", () => {
  it("names a certificate by its CN, else its first SAN, and takes its role from the OU", () => {
    assert.deepEqual(certIdentity({ CN: "alice", OU: "admin" }), {
      kind: "client",
      name: "alice",
      role: "admin",
      via: "cert",
    });
    const noOu = certIdentity({ CN: "bob" });
    assert.equal(noOu.kind === "client" && noOu.role, "readwrite");
    const several = certIdentity({ CN: "c", OU: ["team-x", "read", "admin"] });
    assert.equal(several.kind === "client" && several.role, "admin");
    const san = certIdentity({}, "DNS:svc.example, URI:spiffe://x");
    assert.equal(san.kind === "client" && san.name, "svc.example");
  });

  it("reads the first subject alternative name as node:tls writes it, quoted when it must be", () => {
    // node:tls writes a name holding a comma, a quote, a backslash or a control character as a
    // JSON string after its type (`DNS:"a\u002cb"`: Node 24, with a certificate made by openssl):
    // split on "," and cut at the first colon, it came out with its quotes and escapes.
    const nameOf = (subjectAltName: string): string | false => {
      const id = certIdentity({}, subjectAltName);
      return id.kind === "client" && id.name;
    };
    assert.equal(nameOf('DNS:"team\\u002calice\\\\x", URI:spiffe://cairn/client'), "team,alice\\x");
    assert.equal(nameOf('URI:"spiffe://c/a\\u002cb", DNS:plain.example'), "spiffe://c/a,b");
    assert.equal(nameOf('URI:"spiffe://c/\\"q\\"", DNS:x'), 'spiffe://c/"q"');
    assert.equal(nameOf('email:"a\\u0007b@example.com"'), "a\u0007b@example.com");
    assert.equal(nameOf("IP Address:10.0.0.1, DNS:x"), "10.0.0.1");
    assert.equal(nameOf("URI:spiffe://c/s"), "spiffe://c/s");
    // A quoted name a comma follows inside its quotes is still one name.
    assert.equal(nameOf('DNS:"x\\u002c y", DNS:z'), "x, y");
    // Not what node:tls writes (an unterminated or broken string): no name, not a guess.
    assert.equal(nameOf('DNS:"unterminated, DNS:x'), "");
    assert.equal(nameOf('DNS:"bad \\q escape", DNS:x'), "");
    // A CN still comes first.
    const carol = certIdentity({ CN: "carol" }, 'DNS:"a\\u002cb"');
    assert.equal(carol.kind === "client" && carol.name, "carol");
  });
});

describe("parseTokens", () => {
  const hex = createHash("sha256").update("a-token-of-enough-length").digest("hex");

  it("looks tokens up by their hash, whichever form the file gives", () => {
    const table = parseTokens(
      "t.yaml",
      `tokens:\n  - {name: a, role: read, token: a-token-of-enough-length-2}\n  - {name: b, role: admin, sha256: ${hex.toUpperCase()}}\n`,
    );
    assert.equal(table.size, 2);
    assert.deepEqual(table.lookup("Bearer a-token-of-enough-length-2"), {
      kind: "client",
      name: "a",
      role: "read",
      via: "token",
    });
    const b = table.lookup("bearer a-token-of-enough-length");
    assert.equal(typeof b === "object" && b.name, "b");
    assert.equal(typeof table.lookup("Bearer nope"), "string");
    assert.equal(typeof table.lookup("Basic abc"), "string");
    assert.equal(typeof table.lookup("Bearer"), "string");
  });

  it("refuses a bad file naming the entry, never the token", () => {
    const cases: [string, RegExp][] = [
      ["[1, 2]", /a mapping with a `tokens` list/],
      ["tokens: 3", /must be a list/],
      [
        "tokens:\n  - {name: a, role: root, token: a-token-of-enough-length}",
        /tokens\[0\] \(a\): role/,
      ],
      ["tokens:\n  - {name: a, role: read, token: short-secret}", /at least 16/],
      ["tokens:\n  - {name: a, role: read}", /exactly one of sha256 and token/],
      ["tokens:\n  - {name: a, role: read, sha256: abc}", /64 hexadecimal/],
      ["tokens:\n  - {name: 'a b', role: read, sha256: abc}", /name must be/],
      [
        `tokens:\n  - {name: a, role: read, sha256: ${hex}}\n  - {name: a, role: read, token: other-token-long-enough}`,
        /appears twice/,
      ],
      [
        `tokens:\n  - {name: a, role: read, sha256: ${hex}}\n  - {name: b, role: admin, token: a-token-of-enough-length}`,
        /the same token as another/,
      ],
      ["tokens:\n  - {name: a, role: read, token: short-secret, extra: 1}", /unknown key "extra"/],
      // A token written as a key (a mapping of token to role, say): named by its length only.
      [
        `tokens:\n  - {name: a, role: read, sha256: ${hex}, a-token-of-enough-length: admin}`,
        /tokens\[0\] has an unknown key of 24 characters/,
      ],
      [`tokens: []\na-token-of-enough-length: admin`, /unknown key of 24 characters/],
      ["tokens: [", /is not YAML \(.* at line 1, column \d+\)/],
    ];
    for (const [text, want] of cases) {
      assert.throws(
        () => parseTokens("t.yaml", text),
        (err: unknown) =>
          err instanceof TokensFileError &&
          want.test(err.message) &&
          !err.message.includes("short-secret") &&
          !err.message.includes("a-token-of-enough-length"),
        text,
      );
    }
  });

  it("never quotes a token YAML reads as an alias or a tag, in a refusal or a warning", async () => {
    // A plain token may start with any visible character; unquoted, `*` makes it an alias and
    // `!` a tag, and the parser's words for those quote it.
    const warnings: string[] = [];
    const onWarning = (w: Error): void => void warnings.push(`${w.name}: ${w.message}`);
    process.on("warning", onWarning);
    try {
      for (const [text, want] of [
        ["tokens:\n  - name: a\n    role: read\n    token: *a-token-of-enough-length\n", /alias/],
        ["tokens:\n  - name: a\n    role: read\n    token: !a-token-of-enough-length\n", /tag/],
      ] as const) {
        assert.throws(
          () => parseTokens("t.yaml", text),
          (err: unknown) =>
            err instanceof TokensFileError &&
            want.test(err.message) &&
            !err.message.includes("a-token-of-enough-length"),
          text,
        );
      }
      // process.emitWarning emits on the next tick.
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off("warning", onWarning);
    }
    assert.deepEqual(
      warnings.filter((w) => w.includes("a-token-of-enough-length")),
      [],
      "a token on standard error",
    );
  });
});
