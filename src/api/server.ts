/**
 * The node's gRPC server on `rpc_addr`: cairn.v1 KV, Meta and Admin, the standard health service
 * (grpc.health.v1, for Kubernetes probes and load balancers) and server reflection (grpcurl).
 */
import { randomBytes, timingSafeEqual } from "node:crypto";
import {
  ResponderBuilder,
  Server,
  ServerCredentials,
  type ServerDuplexStream,
  type ServerInterceptor,
  ServerInterceptingCall,
  ServerListenerBuilder,
  type ServiceDefinition,
  status,
  type UntypedServiceImplementation,
} from "@grpc/grpc-js";
import { ReflectionService } from "@grpc/reflection";
import { HealthImplementation } from "grpc-health-check";
import type { ClusterViewPublisher } from "../cluster/index.ts";
import { CairnError } from "../common/index.ts";
import type { TlsFiles } from "../common/tls-files.ts";
import { type HostPort, parseHostPort } from "../config/index.ts";
import {
  bindErrorFor,
  type CairnMetrics,
  type KvOperation,
  type Logger,
  LogWindow,
} from "../ops/index.ts";
import {
  MAX_SNAPSHOT_CHUNK_MESSAGE_BYTES,
  RAFT_SERVER_OPTIONS,
  type RaftService,
} from "../replication/index.ts";
import { adminService, type LeadershipTransfer, type MemberAdmin } from "./admin-service.ts";
import { type ForwardOptions, Forwarder } from "./forward.ts";
import type { WorkerTunnels } from "./front-end.ts";
import type { AuthSetup } from "./handoff.ts";
import type { ConnectionSlots } from "./connection-slots.ts";
import {
  type FrontEndEvent,
  type FrontEndLimits,
  IoThreadListenError,
  IoThreads,
  MethodTable,
} from "./io-threads.ts";
import { kvService, maxAnswerBytes, scanPageBytes } from "./kv-service.ts";
import { servePeerCall } from "./peer-calls.ts";
import type { PeerCall, PeerReply } from "../replication/index.ts";
import { withFastKvCodecs } from "./kv-codec.ts";
import { withSharedViewEncoder } from "./view-codec.ts";
import { type MetaService, metaService } from "./meta-service.ts";
import { loadCairnProto, loadRaftDefinition, loadStandardDefinition } from "./proto.ts";
import { refusingMalformed, WireRules } from "./strict-wire.ts";
import type { AdminStore, KvStore } from "./store.ts";
import type { Limits } from "./validate.ts";
import { INTERNAL_KEY } from "./wire.ts";

export interface RpcServerOptions {
  /** `rpc_addr`; port 0 picks a free port (see the address start() returns). */
  readonly address: string;
  /** The multi-raft driver (MultiRaft), or any store with its KV and Admin operations. */
  readonly store: KvStore & AdminStore;
  readonly metrics: CairnMetrics;
  readonly views: ClusterViewPublisher;
  readonly logger: Logger;
  readonly limits: Limits;
  readonly maxMessageBytes: number;
  /**
   * This node's id, named in the `cairn-served-by` trailer of the Puts, Gets and Deletes it
   * serves (kv-service.ts); `forward.nodeId` when absent. Without either, no such trailer.
   */
  readonly nodeId?: string;
  /**
   * The peer service (cairn.v1.Raft, createRaftService), served beside the others when given.
   * Its frames may be as large as RAFT_SERVER_OPTIONS allows (a round's messages for one peer;
   * snapshots come in chunks): with it, the server's receive limit is raised to that.
   */
  readonly raft?: RaftService;
  /**
   * Cluster mode: forward KV calls refused with NotLeaderError to the shard's leader (forward.ts).
   * Absent (single node): a refusal is answered here, UNAVAILABLE with the leader hint.
   */
  readonly forward?: ForwardOptions;
  /** Cluster mode: Admin.TransferLeader through the meta group (admin-service.ts). */
  readonly transferLeader?: LeadershipTransfer;
  /**
   * Cluster mode: why this node's cluster view has stopped following the cluster (it was
   * decommissioned), or null; Meta.WatchCluster is refused, UNAVAILABLE, while it names one.
   */
  readonly staleViewReason?: () => string | null;
  /** Cluster mode: Admin.DecommissionNode and Admin.RemoveNode (src/node/members-admin.ts). */
  readonly memberAdmin?: MemberAdmin;
  /**
   * gRPC I/O threads (io-threads.ts): with n > 0, n worker threads serve `address` (the HTTP/2
   * and gRPC work) and hand each call to this thread; 0 (the default) runs the same front end
   * in this thread.
   */
  readonly ioThreads?: number;
  /**
   * `address`'s port is already bound by this node's own gRPC listeners (a shard worker after
   * the first, src/node/shard-workers.ts): join them instead of first checking that it is free.
   */
  readonly joinsPort?: boolean;
  /** An I/O thread died after start: the node can no longer serve its connections. */
  readonly onFatal?: (err: unknown) => void;
  /**
   * A shard worker in cluster mode: the peers' connections and snapshot streams aimed at another
   * worker go to it (front-end.ts, worker-tunnel.ts).
   */
  readonly tunnels?: WorkerTunnels;
  /** What one connection may make the node spend (`rpc.*`; absent fields: the defaults). */
  readonly frontEnd?: Partial<Omit<FrontEndLimits, "peerMaxReceive" | "peerSnapshotMaxReceive">>;
  /**
   * The node's count of connections open on `address` (`rpc.max_connections`), shared with
   * every front end of the node, a shard worker's too; absent, connections are not bounded.
   */
  readonly connections?: ConnectionSlots;
  /** TLS on `address` (`tls.*`, tls-front.ts); absent, cleartext. */
  readonly tls?: TlsFiles;
  /**
   * Who may call what (`auth.tokens_file`, `tls.client_ca_file`; authz.ts): every front end
   * checks each call before it is dispatched. Absent, every call is open.
   */
  readonly auth?: AuthSetup;
  /**
   * The process's internal key (wire.ts INTERNAL_KEY), the same in every shard worker, whose
   * front ends proxy to each other's servers; absent, this server makes its own.
   */
  readonly internalKey?: string;
}

const SERVICES = ["cairn.v1.KV", "cairn.v1.Meta", "cairn.v1.Admin"];

/** The front end's events for the node's bounds (connection-slots.ts), and their log lines. */
const NODE_BOUND_MESSAGES: ReadonlyMap<FrontEndEvent["code"], string> = new Map([
  ["CAIRN_ERR_CONNECTIONS_FULL", "the node holds its most connections; new ones are refused"],
  ["CAIRN_ERR_STREAMS_FULL", "the node holds its most streaming calls; new ones are refused"],
  ["CAIRN_ERR_BACKPRESSURE", "the node has no room for more requests still arriving"],
  ["CAIRN_ERR_REQUEST_TOO_SLOW", "a request did not arrive whole in time; it was answered unrun"],
] as const);

/**
 * Logs the front end's events a client causes at will, one line each: a connection ended or
 * refused (a byte of TLS to a cleartext port, a header block in too many frames), a call refused
 * for its credentials. At most `perWindow` lines of each code every `windowMs` (LogWindow), the
 * first after a full window saying how many were left out. Unbounded, one client opening 1,800
 * such connections a second wrote as many WARN lines (0.8 MB) a second. The lines hold the
 * reason (who, which method, which role it lacks), never a token.
 */
class ClientEventLog {
  readonly #log: Logger;
  readonly #windows = new Map<FrontEndEvent["code"], LogWindow>();
  readonly #perWindow: number;
  readonly #windowMs: number;

  constructor(log: Logger, perWindow = 10, windowMs = 10_000) {
    this.#log = log;
    this.#perWindow = perWindow;
    this.#windowMs = windowMs;
  }

  log(level: "warn" | "error", message: string, event: FrontEndEvent, withMethod = false): void {
    let window = this.#windows.get(event.code);
    if (window === undefined) {
      window = new LogWindow(this.#perWindow, this.#windowMs);
      this.#windows.set(event.code, window);
    }
    const skipped = window.admit();
    if (skipped === null) return;
    const fields: Record<string, unknown> = { code: event.code, peer: event.peer };
    if (withMethod) fields["method"] = event.method;
    fields["reason"] = event.message;
    if (skipped > 0) fields["not_logged_before"] = skipped;
    this.#log[level](message, fields);
  }
}

/** The KV methods whose refusals count in kv_requests_total. */
const KV_OPERATION_BY_PATH: ReadonlyMap<string, KvOperation> = new Map([
  ["/cairn.v1.KV/Put", "put"],
  ["/cairn.v1.KV/Get", "get"],
  ["/cairn.v1.KV/Delete", "delete"],
  ["/cairn.v1.KV/Scan", "scan"],
] as const);

export class RpcServer {
  readonly #options: RpcServerOptions;
  readonly #server: Server;
  readonly #health: HealthImplementation;
  readonly #meta: MetaService;
  readonly #forwarder: Forwarder | undefined;
  readonly #table = new MethodTable();
  readonly #serverOptions: Record<string, number>;
  #ioThreads: IoThreads | null = null;
  #internalAddress = "";
  readonly #internalKey: string;
  readonly #clientEvents: ClientEventLog;

  constructor(options: RpcServerOptions) {
    this.#options = options;
    this.#clientEvents = new ClientEventLog(options.logger);
    this.#serverOptions = {
      // A peer's frame may carry a round's appends (RAFT_SERVER_OPTIONS); client calls are
      // bounded by the key and value limits their handlers check.
      "grpc.max_receive_message_length":
        options.raft === undefined
          ? options.maxMessageBytes
          : Math.max(
              options.maxMessageBytes,
              RAFT_SERVER_OPTIONS["grpc.max_receive_message_length"],
            ),
      "grpc.max_send_message_length": options.maxMessageBytes,
    };
    this.#internalKey = options.internalKey ?? newInternalKey();
    this.#server = new Server({
      ...this.#serverOptions,
      interceptors: [internalCallsOnly(this.#internalKey)],
    });
    // Every service is added through the recorder, so the front end learns every method.
    const server = this.#server;
    const table = this.#table;
    // A streaming call's request that does not decode is refused as the client's mistake, as a
    // unary call's is, not answered INTERNAL by grpc-js (refusingMalformed).
    const recorder = {
      addService(d: ServiceDefinition, impl: UntypedServiceImplementation): void {
        const { definition, implementation } = refusingMalformed(d, impl);
        table.add(definition, implementation);
        server.addService(definition, implementation);
      },
    } as unknown as Server;
    const { definition, proto } = loadCairnProto();
    const v1 = proto.cairn.v1;
    // Every request is held to protobuf's wire rules before protobufjs decodes it
    // (strict-wire.ts); Put's and Get's fast decoders take the shapes they know first.
    const wire = new WireRules(definition, loadRaftDefinition(), loadStandardDefinition());
    const kv = withFastKvCodecs(wire.strictService(v1.KV.service));
    const servedBy = options.nodeId ?? options.forward?.nodeId;
    this.#forwarder =
      options.forward === undefined
        ? undefined
        : new Forwarder(options.forward, kv, options.maxMessageBytes);
    recorder.addService(
      kv,
      kvService(options.store, options.metrics, options.limits, {
        log: options.logger,
        scanPageBytes: scanPageBytes(options.maxMessageBytes, options.limits),
        ...(this.#forwarder === undefined ? {} : { forwarder: this.#forwarder }),
        ...(servedBy === undefined ? {} : { nodeId: servedBy }),
      }),
    );
    this.#meta = metaService(options.views, options.staleViewReason);
    recorder.addService(
      withSharedViewEncoder(wire.strictService(v1.Meta.service)),
      this.#meta.implementation,
    );
    recorder.addService(
      wire.strictService(v1.Admin.service),
      adminService(options.store, options.logger, options.transferLeader, options.memberAdmin),
    );
    if (options.raft !== undefined) {
      // Stream's frames are bytes its own decoder reads (frame-decode.ts).
      recorder.addService(
        wire.strictService(options.raft.definition, [options.raft.rawStream.path]),
        options.raft.implementation,
      );
      table.addRawStream(options.raft.rawStream.path, options.raft.rawStream.handler);
    }
    this.#health = new HealthImplementation(
      Object.fromEntries(["", ...SERVICES].map((s) => [s, "NOT_SERVING" as const])),
    );
    // Their requests too: one that breaks the rules was answered (a health check SERVING) where
    // every other service's is refused. A health check is a few bytes: the check costs little.
    const strict = {
      addService(d: ServiceDefinition, impl: UntypedServiceImplementation): void {
        recorder.addService(wire.strictService(d), impl);
      },
    } as unknown as Server;
    this.#health.addToServer(strict);
    new ReflectionService(definition).addToServer(answersTaken(strict));
  }

  /** Binds and starts serving; rejects with AddressInUseError / BindError naming `rpc_addr`. */
  async start(): Promise<HostPort> {
    const { address } = this.#options;
    const parsed = parseHostPort(address, { allowPortZero: true, allowUnspecified: true });
    // The configuration checks rpc_addr with the same parser: this is a caller's mistake.
    if (!parsed.ok) throw bindErrorFor(new Error(parsed.reason), address, "rpc_addr");
    const { host } = parsed.value;
    // The front end (front-end.ts; in this thread, or in I/O threads) listens on rpc_addr; this
    // thread's grpc-js server, on a loopback port, serves the streaming calls it proxies.
    const internal = await this.#bind("127.0.0.1:0");
    this.#internalAddress = `127.0.0.1:${internal}`;
    this.#ioThreads = new IoThreads({
      count: this.#options.ioThreads ?? 0,
      host: parsed.value.host,
      port: parsed.value.port,
      mainAddress: `127.0.0.1:${internal}`,
      internalKey: this.#internalKey,
      table: this.#table,
      // Every method but the peers' is bounded by limits.max_message_bytes; only the peers'
      // (Raft rounds, snapshots) by the raised limit this thread's grpc-js server keeps. An
      // answer may pass it by a key: a Scan page of one largest item (maxAnswerBytes).
      serverOptions: {
        "grpc.max_receive_message_length": this.#options.maxMessageBytes,
        "grpc.max_send_message_length": maxAnswerBytes(
          this.#options.maxMessageBytes,
          this.#options.limits,
        ),
      },
      limits: {
        ...this.#options.frontEnd,
        peerMaxReceive: this.#serverOptions["grpc.max_receive_message_length"] as number,
        // InstallSnapshot's messages after its header: a data chunk at most, not 128 MiB.
        peerSnapshotMaxReceive: MAX_SNAPSHOT_CHUNK_MESSAGE_BYTES,
      },
      onEvent: (event) => this.#onFrontEndEvent(event),
      ...(this.#options.tls === undefined ? {} : { tls: this.#options.tls }),
      ...(this.#options.auth === undefined ? {} : { auth: this.#options.auth }),
      ...(this.#options.joinsPort === true ? { joinsPort: true } : {}),
      ...(this.#options.tunnels === undefined ? {} : { tunnels: this.#options.tunnels }),
      ...(this.#options.connections === undefined
        ? {}
        : { connections: this.#options.connections.shared }),
      onFailure: (err) => this.#options.onFatal?.(err),
    });
    try {
      const port = await this.#ioThreads.start();
      for (const s of ["", ...SERVICES]) this.#health.setStatus(s, "SERVING");
      return { host, port };
    } catch (err) {
      this.#server.forceShutdown();
      if (
        err instanceof IoThreadListenError &&
        (err.code === "CAIRN_ERR_TLS_FILE" || err.code === "CAIRN_ERR_AUTH_TOKENS_FILE")
      ) {
        // A file changed between the configuration's check and the front end's read.
        throw new CairnError(err.code, err.message);
      }
      if (err instanceof IoThreadListenError) throw bindErrorFor(err, address, "rpc_addr");
      throw err;
    }
  }

  /** A connection the front end ended: its own failure (ERROR) or a client past a limit (WARN). */
  #onFrontEndEvent(event: FrontEndEvent): void {
    if (this.#onTlsEvent(event) || this.#onAuthEvent(event)) return;
    const full = NODE_BOUND_MESSAGES.get(event.code);
    if (full !== undefined) {
      // Counted where the bounds are (connection-slots.ts, read by the metrics); at most one
      // event a second from each front end.
      this.#options.logger.warn(full, {
        code: event.code,
        peer: event.peer,
        ...(event.method === undefined ? {} : { method: event.method }),
        reason: event.message,
      });
      return;
    }
    const internal = event.code === "CAIRN_ERR_CONNECTION_INTERNAL";
    this.#options.metrics.rpcConnectionEnded(internal ? "internal" : "limit");
    if (internal) {
      this.#clientEvents.log(
        "error",
        "a gRPC connection failed on the node's own code; it was ended",
        event,
      );
    } else {
      this.#clientEvents.log(
        "warn",
        "a gRPC client went past a limit; its connection was ended",
        event,
      );
    }
  }

  /** The TLS events (tls-front.ts): true when `event` was one. */
  #onTlsEvent(event: FrontEndEvent): boolean {
    const log = this.#options.logger;
    const fields = { code: event.code, peer: event.peer, reason: event.message };
    switch (event.code) {
      case "CAIRN_TLS_RELOADED":
        log.info("the TLS files changed and were reloaded", { reason: event.message });
        return true;
      case "CAIRN_ERR_TLS_RELOAD":
        log.error("the TLS files changed but cannot be used", fields);
        return true;
      case "CAIRN_ERR_TLS_CLIENT_REFUSED":
        this.#clientEvents.log(
          "warn",
          "a client's TLS certificate was refused; its connection was closed",
          event,
        );
        return true;
      case "CAIRN_ERR_PEER_REFUSED":
        this.#options.metrics.peerCallRefused("certificate");
        this.#clientEvents.log("warn", "raft call refused", event);
        return true;
      case "CAIRN_ERR_TLS_MISMATCH":
        this.#clientEvents.log(
          "warn",
          "a connection spoke cleartext to this TLS port, or TLS to this cleartext one; it was closed",
          event,
        );
        return true;
      default:
        return false;
    }
  }

  /**
   * The access control events (call-auth.ts): true when `event` was one. A refused KV call
   * counts in kv_requests_total under `unauthenticated` or `permission_denied` (the client's
   * doing, not the server's fault); each refusal is logged at WARN, a few per window.
   */
  #onAuthEvent(event: FrontEndEvent): boolean {
    const log = this.#options.logger;
    switch (event.code) {
      case "CAIRN_AUTH_RELOADED":
        log.info("the tokens file changed and was reloaded", { reason: event.message });
        return true;
      case "CAIRN_ERR_AUTH_RELOAD":
        log.error("the tokens file changed but cannot be used", {
          code: event.code,
          reason: event.message,
        });
        return true;
      case "CAIRN_ERR_UNAUTHENTICATED":
      case "CAIRN_ERR_PERMISSION_DENIED": {
        const op = event.method === undefined ? undefined : KV_OPERATION_BY_PATH.get(event.method);
        if (op !== undefined) {
          this.#options.metrics.recordKv(
            op,
            event.code === "CAIRN_ERR_UNAUTHENTICATED" ? "unauthenticated" : "permission_denied",
            0,
          );
        }
        this.#clientEvents.log(
          "warn",
          "a call was refused: its caller may not make it",
          event,
          true,
        );
        return true;
      }
      default:
        return false;
    }
  }

  /**
   * This thread's own gRPC server on loopback, which serves the streaming calls (the front end
   * proxies them); another shard worker's front end sends it those aimed at this worker.
   */
  get internalAddress(): string {
    return this.#internalAddress;
  }

  /** The key a call to `internalAddress` must carry (wire.ts INTERNAL_KEY); for tests. */
  get internalKey(): string {
    return this.#internalKey;
  }

  /** Serves a connection another shard worker accepted and handed over (WorkerTunnels). */
  adopt(fd: number, rest: Buffer | null): void {
    if (this.#ioThreads === null) throw new Error("the gRPC server has not started");
    this.#ioThreads.adopt(fd, rest);
  }

  /** Binds this thread's server; resolves with the port. */
  #bind(address: string): Promise<number> {
    return new Promise((resolve, reject) => {
      this.#server.bindAsync(address, ServerCredentials.createInsecure(), (err, port) => {
        if (err !== null) {
          // grpc-js reports the listen error inside its message.
          const code = /EADDRINUSE/.test(err.message)
            ? "EADDRINUSE"
            : /EACCES/.test(err.message)
              ? "EACCES"
              : undefined;
          reject(
            bindErrorFor(
              code === undefined ? err : Object.assign(err, { code }),
              this.#options.address,
              "rpc_addr",
            ),
          );
          return;
        }
        resolve(port);
      });
    });
  }

  /**
   * Serves a KV call peer `from` forwarded over its Raft stream (peer-calls.ts) with the same
   * handlers as a client's; `answer` hears exactly once.
   */
  servePeerCall(from: string, call: PeerCall, answer: (reply: PeerReply) => void): void {
    servePeerCall(this.#table, from, call, answer);
  }

  /**
   * Writes the answers framed this turn to their connections now rather than after the turn (for
   * a caller about to block the thread on a synchronous write).
   */
  flushNow(): void {
    this.#ioThreads?.flushNow();
  }

  /** Stops taking calls, lets in-flight calls finish within `deadlineMs`, then cuts the rest. */
  async close(deadlineMs: number): Promise<void> {
    for (const s of ["", ...SERVICES]) this.#health.setStatus(s, "NOT_SERVING");
    this.#meta.endAll();
    this.#options.raft?.endAll();
    // The I/O threads first: their calls in flight are answered by this thread meanwhile.
    const started = performance.now();
    await this.#ioThreads?.close(deadlineMs);
    deadlineMs = Math.max(0, deadlineMs - (performance.now() - started));
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.#server.forceShutdown();
        resolve();
      }, deadlineMs);
      this.#server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
    // After the drain: in-flight forwards finished (or were cut with their calls).
    this.#forwarder?.close();
  }

  /** Aborts every call now. */
  destroy(): void {
    this.#ioThreads?.destroy();
    this.#server.forceShutdown();
    this.#forwarder?.close();
  }
}

/**
 * A server to add services to whose two-way streaming calls read a client's next request only
 * once the answers written so far are taken. grpc-js's server reflection writes an answer for
 * every request whatever the stream's backpressure: a client that reads no answer and sends
 * requests (an 18-byte request, a 2.4 KB answer) had them buffered without bound. Paused, the
 * call stops reading (grpc-js reads a message when asked for one), and the HTTP/2 window then
 * stops the client.
 */
function answersTaken(server: Server): Server {
  return {
    addService(d: ServiceDefinition, impl: UntypedServiceImplementation): void {
      const paced: UntypedServiceImplementation = {};
      for (const [name, handler] of Object.entries(impl)) {
        const method = d[name];
        paced[name] =
          method?.requestStream === true && method.responseStream === true
            ? pacedByAnswers(handler as (call: ServerDuplexStream<unknown, unknown>) => void)
            : handler;
      }
      server.addService(d, paced);
    },
  } as unknown as Server;
}

function pacedByAnswers(
  handler: (call: ServerDuplexStream<unknown, unknown>) => void,
): (call: ServerDuplexStream<unknown, unknown>) => void {
  return (call) => {
    const write = call.write.bind(call) as (message: unknown) => boolean;
    const resume = (): void => {
      call.resume();
    };
    call.write = ((message: unknown): boolean => {
      const taken = write(message);
      if (!taken && !call.isPaused()) {
        call.pause();
        call.once("drain", resume);
      }
      return taken;
    }) as typeof call.write;
    handler(call);
  };
}

/** A process's internal key (wire.ts INTERNAL_KEY): 256 random bits. */
export function newInternalKey(): string {
  return randomBytes(32).toString("base64url");
}

/**
 * The interceptor of a thread's own grpc-js server on loopback: a call must carry the process's
 * internal key, which only the node's front ends add, after their own checks (TLS, tokens, a
 * peer's certificate). Without it any local process could call the port: the KV service past
 * `auth.*`, and the peers' service (Raft messages, snapshots) with no certificate. The key is
 * taken out of the metadata the handlers see.
 */
function internalCallsOnly(key: string): ServerInterceptor {
  const expected = Buffer.from(key);
  return (_method, call) => {
    const listener = new ServerListenerBuilder()
      .withOnReceiveMetadata((metadata, next) => {
        const got = metadata.get(INTERNAL_KEY)[0];
        metadata.remove(INTERNAL_KEY);
        const given = typeof got === "string" ? Buffer.from(got) : null;
        if (
          given !== null &&
          given.length === expected.length &&
          timingSafeEqual(given, expected)
        ) {
          next(metadata);
          return;
        }
        call.sendStatus({
          code: status.UNAUTHENTICATED,
          details:
            "this is the node's internal port: it takes only the calls of the node's own front end (call rpc_addr)",
        });
      })
      .build();
    return new ServerInterceptingCall(
      call,
      new ResponderBuilder().withStart((next) => next(listener)).build(),
    );
  };
}
