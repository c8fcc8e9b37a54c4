/**
 * Loads proto/ at run time with the options the generated types (src/api/generated/) were made
 * with; `npm run check` verifies the two agree.
 */
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadPackageDefinition } from "@grpc/grpc-js";
import { loadSync, type Options, type PackageDefinition } from "@grpc/proto-loader";
import type { ProtoGrpcType as AdminProto } from "./generated/admin.ts";
import type { ProtoGrpcType as KvProto } from "./generated/kv.ts";
import type { ProtoGrpcType as MetaProto } from "./generated/meta.ts";
import type { ProtoGrpcType as RaftProto } from "./generated/raft.ts";

export const PROTO_DIR = join(import.meta.dirname, "..", "..", "proto");
export const PROTO_FILES = ["cairn/v1/kv.proto", "cairn/v1/meta.proto", "cairn/v1/admin.proto"];
/** The peer service between nodes, kept apart from the client-facing services above. */
export const RAFT_PROTO_FILE = "cairn/v1/raft.proto";

export const LOADER_OPTIONS: Options = {
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
};

export type CairnProto = KvProto & MetaProto & AdminProto;

let cairnProto: { definition: PackageDefinition; proto: CairnProto } | undefined;

/** cairn.v1's client services, loaded once per process (servers, clients and probes share it). */
export function loadCairnProto(): { definition: PackageDefinition; proto: CairnProto } {
  if (cairnProto === undefined) {
    const definition = loadSync(PROTO_FILES, LOADER_OPTIONS);
    cairnProto = { definition, proto: loadPackageDefinition(definition) as unknown as CairnProto };
  }
  return cairnProto;
}

export type { RaftProto };

let raftDefinition: PackageDefinition | undefined;
let raftProto: RaftProto | undefined;

/** cairn.v1.Raft's definition (its message types too), loaded once per process. */
export function loadRaftDefinition(): PackageDefinition {
  raftDefinition ??= loadSync([RAFT_PROTO_FILE], LOADER_OPTIONS);
  return raftDefinition;
}

/** cairn.v1.Raft, loaded once per process (every transport and service shares it). */
export function loadRaftProto(): RaftProto {
  raftProto ??= loadPackageDefinition(loadRaftDefinition()) as unknown as RaftProto;
  return raftProto;
}

let standardDefinition: PackageDefinition | undefined;

/**
 * The message types of the standard services the node also serves, grpc.health.v1 and server
 * reflection (v1 and v1alpha), from the proto files their packages serve them with: the rules
 * their requests are held to (strict-wire.ts) come from them. Loaded once per process.
 */
export function loadStandardDefinition(): PackageDefinition {
  if (standardDefinition === undefined) {
    // A package's proto files, by their path from its main module's directory: @grpc/reflection
    // reads its own from build/proto beside build/src; grpc-health-check's are taken by path, as
    // its main module parses its file as it loads (a client has no use for that).
    const besideMain = (pkg: string, path: string): string =>
      join(dirname(fileURLToPath(import.meta.resolve(pkg))), path);
    const reflection = besideMain("@grpc/reflection", "../proto/grpc/reflection");
    const health = besideMain("grpc-health-check", "../../proto/health/v1/health.proto");
    standardDefinition = loadSync(
      [
        health,
        join(reflection, "v1", "reflection.proto"),
        join(reflection, "v1alpha", "reflection.proto"),
      ],
      LOADER_OPTIONS,
    );
  }
  return standardDefinition;
}
