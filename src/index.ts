/** Cairn's public surface as a package: the TypeScript client (docs/client.md). */
export * from "./client/index.ts";
