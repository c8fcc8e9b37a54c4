/**
 * A node's TLS files (the `tls.*` keys, docs/operations.md "Security"), read and checked
 * together: the configuration checks them at start (src/config/load.ts), and the front end
 * (src/api/front-end.ts) reads them again in each thread that serves `rpc_addr`, at start and
 * whenever one of them changes on disk (TlsFileWatch). A set of files that fails a check is
 * refused with an error that names the key and the file; a reload that fails keeps the files
 * read before.
 */
import { createPrivateKey, type KeyObject, X509Certificate } from "node:crypto";
import { createSecureContext } from "node:tls";
import { FileRefusal, readRegularFileBounded } from "./bounded-read.ts";
import { ReadingFileWatch, stampFiles } from "./file-watch.ts";
import { CairnError } from "./errors.ts";

/** The paths of a node's TLS files. */
export interface TlsFiles {
  /** `tls.cert_file`: the node's certificate (PEM; its chain may follow it). */
  readonly certFile: string;
  /** `tls.key_file`: its private key (PEM, unencrypted). */
  readonly keyFile: string;
  /** `tls.client_ca_file`: when set, clients must present a certificate one of these signed. */
  readonly clientCaFile?: string | undefined;
  /**
   * `tls.peer_ca_file`: the CA of the cluster's nodes. A peer must present a certificate one of
   * these signed, naming the node id it calls as; this node checks its peers' server
   * certificates against it.
   */
  readonly peerCaFile?: string | undefined;
}

/** What the files hold, checked. */
export interface TlsMaterial {
  readonly cert: Buffer;
  readonly key: Buffer;
  readonly clientCa: Buffer | null;
  readonly peerCa: Buffer | null;
  /** The node certificate's end of validity. */
  readonly notAfter: Date;
}

/** A TLS file that cannot be used; `key` is the configuration key that names it. */
export class TlsFileError extends CairnError {
  readonly key: string;
  readonly file: string;
  readonly reason: string;
  /** A certificate not valid yet: the same files may be taken later (TlsFileWatch retries). */
  readonly notYetValid: boolean;

  constructor(key: string, file: string, reason: string, notYetValid = false) {
    super("CAIRN_ERR_TLS_FILE", `${key} (${file}): ${reason}`);
    this.name = "TlsFileError";
    this.key = key;
    this.file = file;
    this.reason = reason;
    this.notYetValid = notYetValid;
  }
}

/**
 * The largest TLS file read: a CA bundle of every root a system trusts is about 220 KB (some
 * 150 certificates), a chain a few KB; 4 MiB leaves room for a bundle twenty times that.
 */
export const MAX_TLS_FILE_BYTES = 4 * 1024 * 1024;

/** A TLS file's bytes, read to MAX_TLS_FILE_BYTES at most; throws TlsFileError. */
export function readTlsFile(key: string, file: string): Buffer {
  try {
    return readRegularFileBounded(file, MAX_TLS_FILE_BYTES);
  } catch (err) {
    if (err instanceof FileRefusal) throw new TlsFileError(key, file, err.reason);
    const code = (err as NodeJS.ErrnoException).code ?? String(err);
    throw new TlsFileError(key, file, `cannot be read: ${code}`);
  }
}

const PEM_CERT = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/** Every certificate of a PEM file; at least one. */
export function certificates(key: string, file: string, pem: Buffer): X509Certificate[] {
  const blocks = pem.toString("latin1").match(PEM_CERT) ?? [];
  if (blocks.length === 0) throw new TlsFileError(key, file, "holds no PEM certificate");
  return blocks.map((block) => {
    try {
      return new X509Certificate(block);
    } catch (err) {
      throw new TlsFileError(key, file, `holds a certificate that does not parse: ${String(err)}`);
    }
  });
}

/**
 * A certificate's subject as node:crypto prints it (`CN=n1\nO=Cairn`), "" when it is empty: its
 * `subject` is then undefined, though typed a string. A certificate may name its holder by its
 * subject alternative names alone (SPIFFE's, some service meshes'), and any CA may sign one.
 */
export function subjectOf(cert: X509Certificate): string {
  return (cert.subject as string | undefined) ?? "";
}

/** Refuses a certificate outside its validity at `now`. */
function checkValidity(key: string, file: string, cert: X509Certificate, now: number): void {
  if (now > cert.validToDate.getTime()) {
    throw new TlsFileError(
      key,
      file,
      `its certificate (${subjectOf(cert).replaceAll("\n", ", ")}) expired on ${cert.validToDate.toISOString()}`,
    );
  }
  if (now < cert.validFromDate.getTime()) {
    throw new TlsFileError(
      key,
      file,
      `its certificate is not valid before ${cert.validFromDate.toISOString()}`,
      true,
    );
  }
}

/**
 * Reads and checks the files: each readable and PEM, the node's certificate within its validity,
 * the key the certificate's, the client CA file's certificates parsable, and OpenSSL willing to
 * make a context of them. Throws TlsFileError.
 */
export function readTlsFiles(
  files: TlsFiles,
  // eslint-disable-next-line no-restricted-properties -- a certificate's validity is wall-clock time
  now: number = Date.now(),
): TlsMaterial {
  const cert = readTlsFile("tls.cert_file", files.certFile);
  const key = readTlsFile("tls.key_file", files.keyFile);
  const [leaf] = certificates("tls.cert_file", files.certFile, cert);
  if (leaf === undefined) throw new TlsFileError("tls.cert_file", files.certFile, "is empty");
  checkValidity("tls.cert_file", files.certFile, leaf, now);
  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey(key);
  } catch (err) {
    throw new TlsFileError(
      "tls.key_file",
      files.keyFile,
      `is not an unencrypted PEM private key: ${(err as Error).message}`,
    );
  }
  if (!leaf.checkPrivateKey(privateKey)) {
    throw new TlsFileError(
      "tls.key_file",
      files.keyFile,
      `is not the key of the certificate in tls.cert_file (${files.certFile})`,
    );
  }
  let clientCa: Buffer | null = null;
  if (files.clientCaFile !== undefined) {
    clientCa = readTlsFile("tls.client_ca_file", files.clientCaFile);
    certificates("tls.client_ca_file", files.clientCaFile, clientCa);
  }
  let peerCa: Buffer | null = null;
  if (files.peerCaFile !== undefined) {
    peerCa = readTlsFile("tls.peer_ca_file", files.peerCaFile);
    certificates("tls.peer_ca_file", files.peerCaFile, peerCa);
  }
  const cas = [clientCa, peerCa].filter((b): b is Buffer => b !== null);
  try {
    createSecureContext({ cert, key, ...(cas.length === 0 ? {} : { ca: cas }) });
  } catch (err) {
    throw new TlsFileError(
      "tls.cert_file",
      files.certFile,
      `OpenSSL refuses the certificate and key: ${(err as Error).message}`,
    );
  }
  return { cert, key, clientCa, peerCa, notAfter: leaf.validToDate };
}

function pathsOf(files: TlsFiles): string[] {
  return [files.certFile, files.keyFile, files.clientCaFile, files.peerCaFile].filter(
    (p): p is string => p !== undefined,
  );
}

/**
 * The files' stamps now, taken before they are read (TlsFileWatch's starting point): a change
 * between this and the read is then seen as a change, never missed.
 */
export function stampTlsFiles(files: TlsFiles): string {
  return stampFiles(pathsOf(files));
}

/** How often TlsFileWatch looks at the files. */
export const TLS_RELOAD_INTERVAL_MS = 1000;

/**
 * Looks at the files every `intervalMs` (stat, not fs.watch: a file replaced by a rename, as
 * certificate managers do, is seen too) and, once any changed, reads them again: `onReload`
 * hears the new material, or `onError` why it was refused (the caller keeps what it had; the
 * watch tries again at the next change, and, for a certificate not valid yet, at every look
 * until it is: a renewal issued where the clock is a little ahead is taken once it is valid,
 * rather than the old certificate served until it expires).
 */
export class TlsFileWatch extends ReadingFileWatch<TlsMaterial, TlsFileError> {
  constructor(
    files: TlsFiles,
    /** stampTlsFiles(files), taken before the files in use were read. */
    readAt: string,
    onReload: (material: TlsMaterial) => void,
    onError: (err: TlsFileError) => void,
    intervalMs = TLS_RELOAD_INTERVAL_MS,
  ) {
    super(
      pathsOf(files),
      readAt,
      () => readTlsFiles(files),
      (err) => err instanceof TlsFileError,
      onReload,
      onError,
      intervalMs,
      (err) => err.notYetValid,
    );
  }
}
