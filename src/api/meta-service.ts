/**
 * The Meta service: WatchCluster streams the full cluster view, then every new one. Its
 * definition must be `withSharedViewEncoder`'s (src/api/view-codec.ts): the handler writes the
 * publisher's views themselves, encoded once for all watchers.
 */
import type { ServerWritableStream, UntypedServiceImplementation } from "@grpc/grpc-js";
import type { ClusterView, ClusterViewPublisher } from "../cluster/index.ts";
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
      const unsubscribe = views.subscribe((view) => call.write(view));
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
