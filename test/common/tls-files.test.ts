/**
 * The node's TLS files reloaded when they change (src/common/tls-files.ts TlsFileWatch;
 * docs/operations.md "Checks at start, rotation"), with certificates made by `cairn cert` and
 * `openssl ca`: a renewed certificate that is not valid yet when it is first read (issued on a
 * host whose clock is a little ahead) is refused then, and taken once it is valid, without the
 * files changing again: the node must not serve the old certificate until it expires. A file
 * that cannot be used (here a device with no end, a FIFO) is refused, the files before kept.
 */
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { stampTlsFiles, type TlsFiles, TlsFileWatch } from "../../src/common/tls-files.ts";
import { certValidFrom, makeCerts } from "../support/tls-certs.ts";

const dir = mkdtempSync(join(tmpdir(), "cairn-tls-files-"));
after(() => rmSync(dir, { recursive: true, force: true }));

describe("TlsFileWatch", () => {
  it("takes a renewed certificate once it is valid, though it was not yet when first read", async () => {
    const certs = makeCerts(join(dir, "certs"));
    const files: TlsFiles = { certFile: certs.nodeCert, keyFile: certs.nodeKey };
    const validFrom = new Date(Date.now() + 3000);
    const future = certValidFrom(certs, dir, validFrom);
    const events: string[] = [];
    let wake: () => void = () => {};
    const next = (): Promise<void> => new Promise((resolve) => (wake = resolve));
    const watch = new TlsFileWatch(
      files,
      stampTlsFiles(files),
      (m) => {
        events.push(`reloaded ${new X509Certificate(m.cert).serialNumber}`);
        wake();
      },
      (err) => {
        events.push(`error ${err.reason}`);
        wake();
      },
      10,
    );
    try {
      let seen = next();
      // Replaced whole by a rename, as a certificate manager does.
      copyFileSync(future, `${certs.nodeCert}.new`);
      renameSync(`${certs.nodeCert}.new`, certs.nodeCert);
      await seen;
      assert.match(events[0] ?? "", /^error its certificate is not valid before/);
      // Bounded: the certificate is valid 3 s from its issue; nothing changes the files again.
      seen = next();
      const deadline = new Promise<void>((resolve) => setTimeout(resolve, 10_000).unref());
      await Promise.race([seen, deadline]);
      const renewed = new X509Certificate(readFileSync(future));
      assert.deepEqual(events, [events[0], `reloaded ${renewed.serialNumber}`], events.join("; "));
      assert.ok(Date.now() >= renewed.validFromDate.getTime(), "not taken before it was valid");
    } finally {
      watch.close();
    }
  });

  it("refuses a file replaced by a device with no end or by a FIFO, keeping the files before", async () => {
    const certs = makeCerts(join(dir, "device"));
    const files: TlsFiles = { certFile: certs.nodeCert, keyFile: certs.nodeKey };
    const events: string[] = [];
    let wake: () => void = () => {};
    const next = (): Promise<void> => new Promise((resolve) => (wake = resolve));
    let seen = next();
    const watch = new TlsFileWatch(
      files,
      stampTlsFiles(files),
      () => {
        events.push("reloaded");
        wake();
      },
      (err) => {
        events.push(`error ${err.key} ${err.reason}`);
        wake();
      },
      10,
    );
    try {
      // Read whole, /dev/zero was read until the memory ran out.
      symlinkSync("/dev/zero", `${certs.nodeCert}.new`);
      renameSync(`${certs.nodeCert}.new`, certs.nodeCert);
      await seen;
      // Opened, a FIFO nobody writes to held the thread (the reload is synchronous) for ever.
      seen = next();
      execFileSync("mkfifo", [`${certs.nodeCert}.new`]);
      renameSync(`${certs.nodeCert}.new`, certs.nodeCert);
      await seen;
      assert.equal(events.length, 2, events.join("; "));
      assert.match(
        events[0] ?? "",
        /^error tls\.cert_file is not a regular file \(a character device\)/,
      );
      assert.match(events[1] ?? "", /^error tls\.cert_file is not a regular file \(a FIFO\)/);
    } finally {
      watch.close();
    }
  });
});
