/**
 * The reading of a certificate's subject alternative names as Node writes them
 * (src/common/alt-names.ts): each type of name, quoted or not, and what ends the list. The
 * strings are Node 24's for certificates made by openssl (test/common/peer-tls.test.ts reads one
 * off a real certificate).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { altNamesOf } from "../../src/common/alt-names.ts";

describe("altNamesOf", () => {
  it("reads every type of name, each value whole, quoted or not", () => {
    assert.deepEqual(
      altNamesOf(
        [
          "DNS:n1",
          'DNS:"a\\u002cb"',
          "IP Address:0:0:0:0:0:0:0:1",
          'URI:"spiffe://c/\\"q\\"\\\\"',
          "email:x@example.com",
          'othername:"XmppAddr:xmpp\\u002cn4"',
          "othername:<unsupported>",
          'DirName:"O=x\\\\\\u002cy\\u002cCN=n6"',
          "Registered ID:1.2.3.4",
          "DNS:",
          "DNS: spaced ",
        ].join(", "),
      ),
      [
        { type: "DNS", value: "n1" },
        { type: "DNS", value: "a,b" },
        { type: "IP Address", value: "0:0:0:0:0:0:0:1" },
        { type: "URI", value: 'spiffe://c/"q"\\' },
        { type: "email", value: "x@example.com" },
        { type: "othername", value: "XmppAddr:xmpp,n4" },
        { type: "othername", value: "<unsupported>" },
        { type: "DirName", value: "O=x\\,y,CN=n6" },
        { type: "Registered ID", value: "1.2.3.4" },
        { type: "DNS", value: "" },
        { type: "DNS", value: " spaced " },
      ],
    );
    assert.deepEqual(altNamesOf(""), []);
  });

  it("ends the list at a name Node does not write, and guesses nothing after it", () => {
    const values = (text: string): string[] => altNamesOf(text).map((n) => n.value);
    assert.deepEqual(values('DNS:a, DNS:"unterminated, DNS:b'), ["a"]);
    assert.deepEqual(values('DNS:a, DNS:"bad \\q escape", DNS:b'), ["a"]);
    assert.deepEqual(values('DNS:a, DNS:"x"y, DNS:b'), ["a"]);
    assert.deepEqual(values("DNS:a, no type, DNS:b"), ["a"]);
    assert.deepEqual(values("DNS:a,DNS:b"), []);
    assert.deepEqual(values('DNS:a"b, DNS:c'), []);
  });
});
