/** The Meta service: WatchCluster streams the full cluster view, then every new one. */
import type { ServerWritableStream, UntypedServiceImplementation } from "@grpc/grpc-js";
import type { ClusterViewPublisher } from "../cluster/index.ts";
import type { ClusterView } from "./generated/cairn/v1/ClusterView.ts";
import type { WatchClusterRequest__Output } from "./generated/cairn/v1/WatchClusterRequest.ts";

export function metaService(views: ClusterViewPublisher): UntypedServiceImplementation {
  return {
    WatchCluster(call: ServerWritableStream<WatchClusterRequest__Output, ClusterView>) {
      const unsubscribe = views.subscribe((view) => {
        call.write({
          epoch: view.epoch,
          nodes: view.nodes.map((n) => ({ ...n })),
          shards: view.shards.map((s) => ({ ...s, replicas: [...s.replicas] })),
          total_shards: view.total_shards,
        });
      });
      const end = (): void => {
        unsubscribe();
      };
      call.on("cancelled", end);
      call.on("close", end);
      call.on("error", end);
    },
  };
}
