/**
 * The node's certificate's end of validity, watched (src/node/cert-expiry.ts): exported, warned
 * of once a day within 30 days, an error once an hour once it has ended, and a replaced
 * certificate read again, once the node's reload would take it (not without its key, not before
 * it is valid). Certificates made as an operator makes them (`cairn cert`).
 */
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { X509Certificate } from "node:crypto";
import { after, describe, it } from "node:test";
import {
  CERT_EXPIRED_LOG_EVERY_MS,
  CERT_EXPIRY_WARN_EVERY_MS,
  CERT_EXPIRY_WARN_MS,
  CertExpiryWatch,
} from "../../src/node/cert-expiry.ts";
import type { TlsFiles } from "../../src/common/tls-files.ts";
import { createLogger } from "../../src/ops/index.ts";
import { certCommand, certValidFrom, expiredCert, makeCerts, read } from "../support/tls-certs.ts";

const DAY = 24 * 3600_000;

describe("CertExpiryWatch", () => {
  const dir = mkdtempSync(join(tmpdir(), "cairn-cert-expiry-"));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const certs = makeCerts(dir);
  const notAfter = new X509Certificate(read(certs.nodeCert)).validToDate.getTime();

  const served: TlsFiles = { certFile: certs.nodeCert, keyFile: certs.nodeKey };

  /** A watch of `files` at the time `clock.now`; its log lines and exported values. */
  function watch(files: TlsFiles, clock: { now: number }) {
    const lines: { level: string; message: string; fields: Record<string, unknown> }[] = [];
    const exported: number[] = [];
    const log = createLogger({
      level: "info",
      sink: { write: (s: string) => void lines.push(JSON.parse(s) as (typeof lines)[number]) },
    });
    const w = new CertExpiryWatch({
      ...files,
      onRead: (t) => exported.push(t),
      log,
      now: () => clock.now,
    });
    return { w, lines, exported };
  }

  it("exports the end of validity and says nothing while it is far", () => {
    const clock = { now: notAfter - 200 * DAY };
    const { w, lines, exported } = watch(served, clock);
    w.check();
    assert.deepEqual(exported, [notAfter]);
    assert.equal(w.notAfter, notAfter);
    clock.now += 100 * DAY;
    w.check();
    assert.deepEqual(lines, []);
    assert.deepEqual(exported, [notAfter], "read once: the file did not change");
  });

  it("warns once a day within 30 days, then logs an error once an hour once it has ended", () => {
    const clock = { now: notAfter - CERT_EXPIRY_WARN_MS + 3600_000 };
    const { w, lines } = watch(served, clock);
    w.check();
    assert.equal(lines.length, 1);
    assert.equal(lines[0]?.level, "WARN");
    assert.match(lines[0]?.message ?? "", /expires in 29 day\(s\)/);
    assert.equal(lines[0]?.fields["not_after"], new Date(notAfter).toISOString());
    assert.equal(lines[0]?.fields["file"], certs.nodeCert);
    // Looked at every minute: not said again within the day.
    for (let i = 0; i < 10; i++) {
      clock.now += 60_000;
      w.check();
    }
    assert.equal(lines.length, 1);
    clock.now += CERT_EXPIRY_WARN_EVERY_MS;
    w.check();
    assert.equal(lines.length, 2);
    assert.equal(lines[1]?.level, "WARN");
    // Ended: an error, repeated each hour.
    clock.now = notAfter + 1;
    w.check();
    assert.equal(lines.length, 3);
    assert.equal(lines[2]?.level, "ERROR");
    assert.match(lines[2]?.message ?? "", /has expired: clients and peers refuse it/);
    clock.now += CERT_EXPIRED_LOG_EVERY_MS / 2;
    w.check();
    assert.equal(lines.length, 3);
    clock.now += CERT_EXPIRED_LOG_EVERY_MS / 2;
    w.check();
    assert.equal(lines.length, 4);
  });

  it("reads a replaced certificate again at the next look, and takes the earliest of a chain", () => {
    const file = join(dir, "watched.crt");
    const keyFile = join(dir, "watched.key");
    const expired = expiredCert(certs, dir, "old");
    copyFileSync(expired.cert, file);
    copyFileSync(expired.key, keyFile);
    const expiredAt = new X509Certificate(read(expired.cert)).validToDate.getTime();
    // Read while it was valid, then served past its end.
    const clock = { now: expiredAt - 3600_000 };
    const { w, lines, exported } = watch({ certFile: file, keyFile }, clock);
    w.check();
    assert.deepEqual(exported, [expiredAt]);
    clock.now = expiredAt + DAY;
    w.check();
    assert.equal(lines.at(-1)?.level, "ERROR");
    // Replaced by a good one, its key with it: read again, and nothing more is said.
    copyFileSync(certs.nodeCert, file);
    copyFileSync(certs.nodeKey, keyFile);
    const said = lines.length;
    clock.now = Date.now();
    w.check();
    assert.deepEqual(exported, [expiredAt, notAfter]);
    clock.now += CERT_EXPIRED_LOG_EVERY_MS;
    w.check();
    assert.equal(lines.length, said);
    // A chain: the node's certificate then the one that expired; the earliest counts.
    const chain = join(dir, "chain.crt");
    writeFileSync(chain, Buffer.concat([read(certs.nodeCert), read(expired.cert)]));
    const c = watch({ certFile: chain, keyFile: certs.nodeKey }, clock);
    c.w.check();
    assert.deepEqual(c.exported, [expiredAt]);
  });

  it("keeps what it read when the file no longer reads", () => {
    const file = join(dir, "broken.crt");
    copyFileSync(certs.nodeCert, file);
    const clock = { now: notAfter - 200 * DAY };
    const { w, exported } = watch({ certFile: file, keyFile: certs.nodeKey }, clock);
    w.check();
    rmSync(file);
    clock.now += 60_000;
    w.check();
    assert.equal(w.notAfter, notAfter);
    assert.deepEqual(exported, [notAfter]);
  });

  it("does not take a replacement the node's reload refuses: a certificate without its key", () => {
    // The node serves a certificate that ends in 30 days; its renewal's certificate is written
    // over it, and its key is not. The reload refuses the pair (CAIRN_ERR_TLS_RELOAD, once) and
    // the node serves the old certificate on: its end is still the one to warn of.
    const d = join(dir, "renewal");
    const made = certCommand([
      ...["create-node", "n1", "--host", "127.0.0.1", "--days", "30", "--certs-dir", d],
      ...["--ca-cert", certs.ca, "--ca-key", join(certs.dir, "ca.key")],
    ]);
    assert.equal(made.code, 0, made.err);
    const files: TlsFiles = { certFile: join(d, "node.crt"), keyFile: join(d, "node.key") };
    const ends = new X509Certificate(read(files.certFile)).validToDate.getTime();
    const clock = { now: Date.now() };
    const { w, lines, exported } = watch(files, clock);
    w.check();
    assert.deepEqual(exported, [ends]);
    assert.match(lines.at(-1)?.message ?? "", /expires in 29 day\(s\)/);
    copyFileSync(certs.nodeCert, `${files.certFile}.new`);
    renameSync(`${files.certFile}.new`, files.certFile);
    clock.now += CERT_EXPIRY_WARN_EVERY_MS;
    w.check();
    assert.deepEqual(exported, [ends], "the end of a certificate the node does not serve");
    assert.equal(w.notAfter, ends);
    assert.match(lines.at(-1)?.message ?? "", /expires in 28 day\(s\)/);
    // Its key follows: the pair is taken, as the reload takes it.
    copyFileSync(certs.nodeKey, `${files.keyFile}.new`);
    renameSync(`${files.keyFile}.new`, files.keyFile);
    const said = lines.length;
    clock.now += 60_000;
    w.check();
    assert.deepEqual(exported, [ends, notAfter]);
    clock.now += CERT_EXPIRY_WARN_EVERY_MS;
    w.check();
    assert.equal(lines.length, said);
  });

  it("takes a renewal not valid yet once it is, the files unchanged, as the reload does", () => {
    const file = join(dir, "renewed.crt");
    copyFileSync(certs.nodeCert, file);
    const files: TlsFiles = { certFile: file, keyFile: certs.nodeKey };
    const clock = { now: Date.now() };
    const { w, exported } = watch(files, clock);
    w.check();
    // Issued where the clock is an hour ahead: not valid yet when it is first seen.
    const future = certValidFrom(certs, join(dir, "renewed"), new Date(clock.now + 3600_000));
    const futureEnds = new X509Certificate(read(future)).validToDate.getTime();
    copyFileSync(future, `${file}.new`);
    renameSync(`${file}.new`, file);
    clock.now += 60_000;
    w.check();
    assert.deepEqual(exported, [notAfter], "taken before it was valid");
    clock.now += 3600_000;
    w.check();
    assert.deepEqual(exported, [notAfter, futureEnds]);
  });
});
