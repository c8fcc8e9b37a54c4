/**
 * Loads proto/ at run time with the options the generated types (src/api/generated/) were made
 * with; `npm run check` verifies the two agree.
 */
import { join } from "node:path";
import { loadPackageDefinition } from "@grpc/grpc-js";
import { loadSync, type Options, type PackageDefinition } from "@grpc/proto-loader";
import type { ProtoGrpcType as AdminProto } from "./generated/admin.ts";
import type { ProtoGrpcType as KvProto } from "./generated/kv.ts";
import type { ProtoGrpcType as MetaProto } from "./generated/meta.ts";

export const PROTO_DIR = join(import.meta.dirname, "..", "..", "proto");
export const PROTO_FILES = ["cairn/v1/kv.proto", "cairn/v1/meta.proto", "cairn/v1/admin.proto"];

export const LOADER_OPTIONS: Options = {
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
};

export type CairnProto = KvProto & MetaProto & AdminProto;

export function loadCairnProto(): { definition: PackageDefinition; proto: CairnProto } {
  const definition = loadSync(PROTO_FILES, LOADER_OPTIONS);
  return { definition, proto: loadPackageDefinition(definition) as unknown as CairnProto };
}
