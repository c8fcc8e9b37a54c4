/**
 * The node's certificate's end of validity, watched (docs/operations.md, "Security"). A
 * certificate that expires in a running node is refused by every client and peer from that
 * moment on (its peers' checks and grpc-js's verify its validity), and nothing said so before:
 * the node's own check of it runs at start and at a reload only. So, while `tls.cert_file` is
 * set, the node reads the end of validity of the certificates in it (the node's and the chain
 * that follows it: the earliest of them, as any one expired breaks the chain), exports it as
 * `cairn_tls_certificate_expiry_timestamp_seconds` (the alert CairnCertificateExpiresSoon
 * watches it), and logs:
 *
 * - at WARN, once a day, while it ends within CERT_EXPIRY_WARN_MS (30 days): the date, and
 *   what to do (replace the files: they are reloaded);
 * - at ERROR, once an hour, once it has ended.
 *
 * The files are looked at every CERT_EXPIRY_CHECK_MS and read again only when they changed
 * (their stamps), with the checks of the front end's reload (readTlsFiles): a certificate replaced
 * by a newer one and its key stops the warnings at the next look, and a replacement the reload
 * refuses (its key not replaced with it, a CA file that no longer reads, a certificate not valid
 * yet) is not taken here either, since the node serves the one before: its end is what clients
 * and peers will meet. A refusal is the reload's to report (tls-front.ts): this watch keeps what
 * it read before and says nothing of it; one that time may lift (not valid yet) is tried again
 * at each look, as the reload does.
 */
import {
  certificates,
  readTlsFiles,
  stampTlsFiles,
  subjectOf,
  TlsFileError,
  type TlsFiles,
} from "../common/tls-files.ts";
import type { Logger } from "../ops/index.ts";

/** How often the certificate's file is looked at. */
export const CERT_EXPIRY_CHECK_MS = 60_000;
/** A certificate that ends within this long is warned of. */
export const CERT_EXPIRY_WARN_MS = 30 * 24 * 3600_000;
/** How often the warning is repeated while it holds. */
export const CERT_EXPIRY_WARN_EVERY_MS = 24 * 3600_000;
/** How often the error is repeated once the certificate has ended. */
export const CERT_EXPIRED_LOG_EVERY_MS = 3600_000;

/** The node's TLS files, as its front end reads them (`tls.*`; the peers' CA only in a cluster). */
export interface CertExpiryOptions extends TlsFiles {
  /** Told of the end of validity read (ms since the epoch). */
  readonly onRead: (notAfterMs: number) => void;
  readonly log: Logger;
  /** Wall-clock time (ms since the epoch): a certificate's validity is wall-clock time. */
  readonly now: () => number;
}

export class CertExpiryWatch {
  readonly #o: CertExpiryOptions;
  readonly #files: TlsFiles;
  #stamp: string | null = null;
  /** The files were refused for a reason time may lift: read them again at the next look. */
  #retry = false;
  /** The earliest end of validity of the file's certificates, or null before a good read. */
  #notAfter: number | null = null;
  /** Who the earliest is, for the log. */
  #subject = "";
  #loggedAt = Number.NEGATIVE_INFINITY;
  #timer: NodeJS.Timeout | null = null;

  constructor(options: CertExpiryOptions) {
    this.#o = options;
    this.#files = {
      certFile: options.certFile,
      keyFile: options.keyFile,
      clientCaFile: options.clientCaFile,
      peerCaFile: options.peerCaFile,
    };
  }

  /** Looks now, then every CERT_EXPIRY_CHECK_MS until stop(). */
  start(): void {
    this.check();
    this.#timer = setInterval(() => this.check(), CERT_EXPIRY_CHECK_MS);
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
  }

  /** The end of validity read last (ms since the epoch), or null. */
  get notAfter(): number | null {
    return this.#notAfter;
  }

  /** One look: reads the files if they changed, and logs as the module doc says. */
  check(): void {
    const file = this.#o.certFile;
    const stamp = stampTlsFiles(this.#files);
    if (stamp !== this.#stamp || this.#retry) {
      this.#stamp = stamp;
      this.#read(file);
    }
    const notAfter = this.#notAfter;
    if (notAfter === null) return;
    const now = this.#o.now();
    const left = notAfter - now;
    const fields = {
      file,
      subject: this.#subject,
      not_after: new Date(notAfter).toISOString(),
    };
    if (left <= 0) {
      if (now - this.#loggedAt < CERT_EXPIRED_LOG_EVERY_MS) return;
      this.#loggedAt = now;
      this.#o.log.error(
        "the node's certificate (tls.cert_file) has expired: clients and peers refuse it; replace the certificate and key files (they are reloaded)",
        fields,
      );
    } else if (left <= CERT_EXPIRY_WARN_MS) {
      if (now - this.#loggedAt < CERT_EXPIRY_WARN_EVERY_MS) return;
      this.#loggedAt = now;
      this.#o.log.warn(
        `the node's certificate (tls.cert_file) expires in ${Math.floor(left / (24 * 3600_000))} day(s): replace the certificate and key files before (they are reloaded)`,
        fields,
      );
    }
  }

  #read(file: string): void {
    let earliest: { notAfter: number; subject: string } | null = null;
    try {
      const material = readTlsFiles(this.#files, this.#o.now());
      this.#retry = false;
      for (const cert of certificates("tls.cert_file", file, material.cert)) {
        const notAfter = cert.validToDate.getTime();
        if (earliest === null || notAfter < earliest.notAfter) {
          earliest = { notAfter, subject: subjectOf(cert).replaceAll("\n", ", ") };
        }
      }
    } catch (err) {
      // The reload reports it (module doc); what was read before stands.
      this.#retry = err instanceof TlsFileError && err.notYetValid;
      return;
    }
    if (earliest === null) return;
    if (earliest.notAfter !== this.#notAfter) this.#loggedAt = Number.NEGATIVE_INFINITY;
    this.#notAfter = earliest.notAfter;
    this.#subject = earliest.subject;
    this.#o.onRead(earliest.notAfter);
  }
}
