/**
 * The node's certificate's end of validity, watched (src/node/cert-expiry.ts): exported, warned
 * of once a day within 30 days, an error once an hour once it has ended, and a replaced
 * certificate read again. Certificates made as an operator makes them (`cairn cert`).
 */
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
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
import { createLogger } from "../../src/ops/index.ts";
import { expiredCert, makeCerts, read } from "../support/tls-certs.ts";

const DAY = 24 * 3600_000;

describe("CertExpiryWatch", () => {
  const dir = mkdtempSync(join(tmpdir(), "cairn-cert-expiry-"));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const certs = makeCerts(dir);
  const notAfter = new X509Certificate(read(certs.nodeCert)).validToDate.getTime();

  /** A watch of `file` at the time `clock.now`; its log lines and exported values. */
  function watch(file: string, clock: { now: number }) {
    const lines: { level: string; message: string; fields: Record<string, unknown> }[] = [];
    const exported: number[] = [];
    const log = createLogger({
      level: "info",
      sink: { write: (s: string) => void lines.push(JSON.parse(s) as (typeof lines)[number]) },
    });
    const w = new CertExpiryWatch({
      certFile: file,
      onRead: (t) => exported.push(t),
      log,
      now: () => clock.now,
    });
    return { w, lines, exported };
  }

  it("exports the end of validity and says nothing while it is far", () => {
    const clock = { now: notAfter - 200 * DAY };
    const { w, lines, exported } = watch(certs.nodeCert, clock);
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
    const { w, lines } = watch(certs.nodeCert, clock);
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
    const expired = expiredCert(certs, dir, "old");
    copyFileSync(expired.cert, file);
    const expiredAt = new X509Certificate(read(expired.cert)).validToDate.getTime();
    const clock = { now: expiredAt + DAY };
    const { w, lines, exported } = watch(file, clock);
    w.check();
    assert.deepEqual(exported, [expiredAt]);
    assert.equal(lines.at(-1)?.level, "ERROR");
    // Replaced by a good one: read again, and nothing more is said.
    copyFileSync(certs.nodeCert, file);
    const said = lines.length;
    clock.now += 60_000;
    w.check();
    assert.deepEqual(exported, [expiredAt, notAfter]);
    clock.now += CERT_EXPIRED_LOG_EVERY_MS;
    w.check();
    assert.equal(lines.length, said);
    // A chain: the node's certificate then the one that expired; the earliest counts.
    const chain = join(dir, "chain.crt");
    writeFileSync(chain, Buffer.concat([read(certs.nodeCert), read(expired.cert)]));
    const c = watch(chain, clock);
    c.w.check();
    assert.deepEqual(c.exported, [expiredAt]);
  });

  it("keeps what it read when the file no longer reads", () => {
    const file = join(dir, "broken.crt");
    copyFileSync(certs.nodeCert, file);
    const clock = { now: notAfter - 200 * DAY };
    const { w, exported } = watch(file, clock);
    w.check();
    rmSync(file);
    clock.now += 60_000;
    w.check();
    assert.equal(w.notAfter, notAfter);
    assert.deepEqual(exported, [notAfter]);
  });
});
