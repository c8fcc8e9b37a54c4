/** The node: storage, replication, gRPC and HTTP put together (the composition root). */
export { CairnNode, type NodeAddresses } from "./node.ts";
export { ShardWorkersNode } from "./shard-workers.ts";
