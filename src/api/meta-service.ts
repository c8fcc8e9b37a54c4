/** The Meta service: WatchCluster streams the full cluster view, then every new one. */
import type { ServerWritableStream, UntypedServiceImplementation } from "@grpc/grpc-js";
import type { ClusterViewPublisher } from "../cluster/index.ts";
import type { ClusterView } from "./generated/cairn/v1/ClusterView.ts";
import type { WatchClusterRequest__Output } from "./generated/cairn/v1/WatchClusterRequest.ts";

export interface MetaService {
  readonly implementation: UntypedServiceImplementation;
  /** Ends every open watch (at shutdown: a watch never ends by itself and would hold the drain). */
  endAll(): void;
}

export function metaService(views: ClusterViewPublisher): MetaService {
  const open = new Set<() => void>();
  const implementation: UntypedServiceImplementation = {
    WatchCluster(call: ServerWritableStream<WatchClusterRequest__Output, ClusterView>) {
      const unsubscribe = views.subscribe((view) => {
        call.write({
          epoch: view.epoch,
          nodes: view.nodes.map((n) => ({ ...n })),
          shards: view.shards.map((s) => ({ ...s, replicas: [...s.replicas] })),
          total_shards: view.total_shards,
          cluster_id: view.cluster_id,
          incarnation: view.incarnation,
        });
      });
      const finish = (): void => {
        unsubscribe();
        open.delete(end);
      };
      const end = (): void => {
        finish();
        call.end();
      };
      open.add(end);
      call.on("cancelled", finish);
      call.on("close", finish);
      call.on("error", finish);
    },
  };
  return {
    implementation,
    endAll() {
      for (const end of [...open]) end();
    },
  };
}
