/**
 * TLS between the nodes of a cluster (issue 54; docs/operations.md, "Security"): who a
 * certificate names, and how a node dials its peers.
 *
 * A node's certificate (`tls.cert_file`) is both its server certificate and, toward its peers,
 * its client certificate; `cairn cert create-node ID` names the node id in it (CN and a DNS
 * subject alternative name). The peers' CA (`tls.peer_ca_file`) signs every node's.
 *
 * - **Dialing** (PeerTls): a node's calls to a peer (its own HTTP/2 client, grpc-js's for
 *   snapshots, the join probe) present the node's certificate and accept the peer's only when
 *   the peer CA signed it and it names the node id dialed (`checkPeerName`): a node that answers
 *   at a peer's address with another node's certificate is not that peer. The files are looked at
 *   every second, as the front end's are; every new connection uses what was read last, on
 *   either client: `dial` is asked per connection, and grpc-js's channels take PeerTls as their
 *   certificate provider (`credentials`), which it asks per connection too. A channel made before
 *   a reload is not rebuilt and its calls in flight are not cut: only its next connection changes.
 * - **Accepting** (identityOf): the front end records, on each TLS connection whose certificate
 *   it verified, which of the node's CAs it chains to (`client`, `peer`, or both when one CA
 *   signs both kinds) and the names it carries (TlsIdentity). The peers' methods then take a call
 *   only from a connection whose certificate the peer CA signed and names the node the call
 *   says it comes from (`cairn-peer`); a later access-control layer reads the same identity off
 *   the call (HandedCall.identity, RawStreamCall.identity).
 */
import {
  createSecureContext,
  type PeerCertificate,
  type SecureContext,
  type TLSSocket,
} from "node:tls";
import { X509Certificate } from "node:crypto";
import { isIP } from "node:net";
import { type ChannelCredentials, type ChannelOptions, experimental } from "@grpc/grpc-js";
import { altNamesOf } from "./alt-names.ts";
import {
  readTlsFiles,
  stampTlsFiles,
  subjectOf,
  type TlsFiles,
  TlsFileWatch,
  type TlsMaterial,
} from "./tls-files.ts";

/** Which of a node's CAs a verified certificate chains to. */
export type TlsAuthority = "client" | "peer";

/** What a verified certificate says of the other end of a connection. */
export interface TlsIdentity {
  /** The CAs of the node that signed it (through its chain); never empty. */
  readonly authorities: readonly TlsAuthority[];
  /** Its subject's CN first (when it has one), then its DNS and IP subject alternative names. */
  readonly names: readonly string[];
}

const PEM_CERT = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/** The certificates of a PEM bundle (unparsable ones skipped: readTlsFiles refused those). */
export function caCertificates(pem: Buffer | null): X509Certificate[] {
  if (pem === null) return [];
  const out: X509Certificate[] = [];
  for (const block of pem.toString("latin1").match(PEM_CERT) ?? []) {
    try {
      out.push(new X509Certificate(block));
    } catch {
      // refused at start by readTlsFiles
    }
  }
  return out;
}

/**
 * The types of subject alternative name that name a node: a host name and an address, what
 * `cairn cert create-node` writes (`DNS:<node id>`, then each `--host`). An email address, a URI,
 * an other name or a directory name is no host's name, even spelled like a node id: a certificate
 * holding `email:n2` does not name node n2, nor does a CA that signs it vouch for host n2.
 */
const NODE_NAME_TYPES: readonly string[] = ["DNS", "IP Address"];

/**
 * The names a certificate carries: its CN, then its DNS and IP subject alternative names, each
 * whole as the certificate holds it (common/alt-names.ts: Node quotes one that holds a comma, a
 * quote or a backslash). The peers' checks take a name only when it equals the node id exactly.
 */
export function certificateNames(cert: X509Certificate): string[] {
  const names: string[] = [];
  for (const line of subjectOf(cert).split("\n")) {
    if (line.startsWith("CN=")) names.push(line.slice(3));
  }
  for (const { type, value } of altNamesOf(cert.subjectAltName ?? "")) {
    if (NODE_NAME_TYPES.includes(type) && value !== "" && !names.includes(value)) names.push(value);
  }
  return names;
}

/** The chain a TLS peer presented, its own certificate first. */
function presentedChain(socket: TLSSocket): X509Certificate[] {
  const chain: X509Certificate[] = [];
  let cert: PeerCertificate | null = socket.getPeerCertificate(true);
  const seen = new Set<string>();
  // Bounded: a chain is a few certificates; the issuer of a root is itself.
  for (let i = 0; i < 16 && cert !== null && cert.raw !== undefined; i++) {
    if (seen.has(cert.fingerprint256)) break;
    seen.add(cert.fingerprint256);
    chain.push(new X509Certificate(cert.raw));
    const next: PeerCertificate | undefined = (cert as { issuerCertificate?: PeerCertificate })
      .issuerCertificate;
    cert = next === undefined ? null : next;
  }
  return chain;
}

/** Whether `ca` signed one of `chain`'s certificates. */
function signedBy(chain: readonly X509Certificate[], ca: X509Certificate): boolean {
  for (const c of chain) {
    if (c.fingerprint256 === ca.fingerprint256) return true;
    if (c.checkIssued(ca) && c.verify(ca.publicKey)) return true;
  }
  return false;
}

/** The CAs of one node, parsed once per reload, to tell a verified certificate's authority. */
export interface Authorities {
  readonly client: readonly X509Certificate[];
  readonly peer: readonly X509Certificate[];
}

export function authoritiesOf(m: TlsMaterial): Authorities {
  return { client: caCertificates(m.clientCa), peer: caCertificates(m.peerCa) };
}

/** Extended key usages a TLS server's certificate may carry: serverAuth, anyExtendedKeyUsage. */
const SERVER_USAGES = ["1.3.6.1.5.5.7.3.1", "2.5.29.37.0"];

/**
 * Whether `cert` can be a node's: a node serves TLS with it, and its peers check it as a server
 * certificate when they dial the node, so its extended key usage, when it has one, names
 * serverAuth (`cairn cert create-node` writes serverAuth and clientAuth). A client's
 * (`create-client`: clientAuth only) is not, even when the peer CA signed it: one CA may sign
 * both (docs/operations.md), and a client's certificate must never pass for a node's.
 */
function nodeUsable(cert: X509Certificate): boolean {
  // node:crypto's `keyUsage` lists the extended key usages (undefined without the extension).
  const usages = cert.keyUsage as string[] | undefined;
  return usages === undefined || usages.some((u) => SERVER_USAGES.includes(u));
}

/**
 * The identity of a TLS connection whose certificate OpenSSL verified against the node's CAs
 * (`socket.authorized`): which of them signed it, and its names. `peer` only for a node's
 * certificate (nodeUsable): a client's certificate the peer CA signed is the client CA's only.
 */
export function identityOf(socket: TLSSocket, cas: Authorities): TlsIdentity {
  const chain = presentedChain(socket);
  const leaf = chain[0];
  const authorities: TlsAuthority[] = [];
  if (cas.client.some((ca) => signedBy(chain, ca))) authorities.push("client");
  if (leaf !== undefined && nodeUsable(leaf) && cas.peer.some((ca) => signedBy(chain, ca))) {
    authorities.push("peer");
  }
  return { authorities, names: leaf === undefined ? [] : certificateNames(leaf) };
}

/**
 * Whether a connection's identity may make the calls of node `nodeId`: a certificate the peer
 * CA signed that names it. Null when it may; else why not (for the refusal).
 */
export function peerIdentityRefusal(identity: TlsIdentity | null, nodeId: string): string | null {
  if (identity === null) {
    return "the connection presented no certificate: a peer must present its node certificate (tls.peer_ca_file)";
  }
  if (!identity.authorities.includes("peer")) {
    return `the connection's certificate (${identity.names[0] ?? "no name"}) is not a node's certificate: not signed by this node's tls.peer_ca_file, or one a client's extended key usage limits to clientAuth`;
  }
  if (!identity.names.includes(nodeId)) {
    return `the connection's certificate names ${JSON.stringify(identity.names)}, not node ${JSON.stringify(nodeId)} the call says it comes from`;
  }
  return null;
}

/**
 * The check of a peer's server certificate (tls.connect's checkServerIdentity): it must name
 * node `expected` (CN or a subject alternative name, exactly). The CA was checked before.
 */
export function checkPeerName(
  expected: string,
): (host: string, cert: PeerCertificate) => Error | undefined {
  return (_host, cert) => {
    if (cert.raw === undefined) return new Error("the peer presented no certificate");
    const names = certificateNames(new X509Certificate(cert.raw));
    if (names.includes(expected)) return undefined;
    return new Error(
      `the peer's certificate names ${JSON.stringify(names)}, not node ${JSON.stringify(expected)} that was dialed`,
    );
  };
}

/** What tls.connect needs to dial node `nodeId` as a peer. */
export interface PeerDial {
  readonly secureContext: SecureContext;
  readonly ALPNProtocols: string[];
  readonly minVersion: "TLSv1.2";
  /** SNI: the node id, unless it is an address (SNI names no address). */
  readonly servername?: string;
  readonly checkServerIdentity: (host: string, cert: PeerCertificate) => Error | undefined;
}

type CaListener = experimental.CaCertificateUpdateListener;
type IdentityListener = experimental.IdentityCertificateUpdateListener;

/**
 * A node's side of dialing its peers over TLS: its certificate and key, and the peer CA, read
 * from the files and reloaded when they change (TlsFileWatch). `onError` hears a reload that
 * failed (the files read before are kept).
 *
 * It is also grpc-js's certificate provider for the node's channels to its peers (`credentials`):
 * grpc-js keeps the latest material it was handed and builds each new connection's context from
 * it, so a reload reaches every channel, old ones too.
 */
export class PeerTls implements experimental.CertificateProvider {
  #material: TlsMaterial;
  #context: SecureContext;
  readonly #watch: TlsFileWatch;
  readonly #caListeners = new Set<CaListener>();
  readonly #identityListeners = new Set<IdentityListener>();

  constructor(files: TlsFiles, onError: (err: Error) => void = () => undefined) {
    if (files.peerCaFile === undefined) throw new Error("PeerTls needs tls.peer_ca_file");
    const readAt = stampTlsFiles(files);
    this.#material = readTlsFiles(files);
    this.#context = PeerTls.#contextOf(this.#material);
    this.#watch = new TlsFileWatch(
      files,
      readAt,
      (m) => {
        const context = PeerTls.#contextOf(m);
        this.#material = m;
        this.#context = context;
        for (const l of this.#caListeners) l(PeerTls.#caOf(m));
        for (const l of this.#identityListeners) l(PeerTls.#identityOf(m));
      },
      onError,
    );
  }

  static #contextOf(m: TlsMaterial): SecureContext {
    return createSecureContext({
      cert: m.cert,
      key: m.key,
      ca: m.peerCa ?? undefined,
      minVersion: "TLSv1.2",
    });
  }

  static #caOf(m: TlsMaterial): experimental.CaCertificateUpdate {
    return { caCertificate: m.peerCa as Buffer };
  }

  static #identityOf(m: TlsMaterial): experimental.IdentityCertificateUpdate {
    return { certificate: m.cert, privateKey: m.key };
  }

  /** How to dial node `nodeId` now. */
  dial(nodeId: string): PeerDial {
    return {
      secureContext: this.#context,
      ALPNProtocols: ["h2"],
      minVersion: "TLSv1.2",
      ...(isIP(nodeId) !== 0 ? {} : { servername: nodeId }),
      checkServerIdentity: checkPeerName(nodeId),
    };
  }

  /**
   * grpc-js credentials to dial node `nodeId` with the files as read at each connection, and
   * the channel options that go with them (the node id as the TLS server name, unless it is an
   * address).
   */
  credentials(nodeId: string): { credentials: ChannelCredentials; options: ChannelOptions } {
    return {
      credentials: experimental.createCertificateProviderChannelCredentials(this, this, {
        checkServerIdentity: checkPeerName(nodeId),
      }),
      options: isIP(nodeId) === 0 ? { "grpc.ssl_target_name_override": nodeId } : {},
    };
  }

  /**
   * grpc-js credentials to dial an address whose node id is not known yet (a seed gossip has
   * not shown): any certificate the peer CA signed is taken, whatever node it names. Only for
   * asking who runs there (probeMember, src/node/cluster.ts), never for a peer's calls: a seed
   * checked against its address as a node id (no certificate names one) never answered, and
   * a first seed founded a cluster without asking it.
   */
  anyMemberCredentials(): ChannelCredentials {
    return experimental.createCertificateProviderChannelCredentials(this, this, {
      checkServerIdentity: (_host, cert) =>
        cert.raw === undefined ? new Error("the peer presented no certificate") : undefined,
    });
  }

  // experimental.CertificateProvider: a listener hears the material at once, then each reload.

  addCaCertificateListener(listener: CaListener): void {
    this.#caListeners.add(listener);
    listener(PeerTls.#caOf(this.#material));
  }

  removeCaCertificateListener(listener: CaListener): void {
    this.#caListeners.delete(listener);
  }

  addIdentityCertificateListener(listener: IdentityListener): void {
    this.#identityListeners.add(listener);
    listener(PeerTls.#identityOf(this.#material));
  }

  removeIdentityCertificateListener(listener: IdentityListener): void {
    this.#identityListeners.delete(listener);
  }

  close(): void {
    this.#watch.close();
  }
}
