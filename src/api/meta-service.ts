/**
 * The Meta service: WatchCluster streams the full cluster view, then every new one. Its
 * definition must be `withSharedViewEncoder`'s (src/api/view-codec.ts): the handler writes the
 * publisher's views themselves, encoded once for all watchers. A node whose view stopped
 * following its cluster (decommissioned: `staleViewReason`) refuses it, UNAVAILABLE
 * (CAIRN_ERR_NOT_MEMBER), with its cluster id and incarnation in the trailers. A watcher that does
 * not read gets the latest view when it does, not every one since.
 */
import type { ServerWritableStream, UntypedServiceImplementation } from "@grpc/grpc-js";
import type { ClusterView, ClusterViewPublisher } from "../cluster/index.ts";
import { NotMemberError } from "../common/errors.ts";
import { toServiceError } from "./errors.ts";
import { CLUSTER_ID_KEY, INCARNATION_KEY } from "./wire.ts";
import type { WatchClusterRequest__Output } from "./generated/cairn/v1/WatchClusterRequest.ts";

export interface MetaService {
  readonly implementation: UntypedServiceImplementation;
  /** Ends every open watch (at shutdown: a watch never ends by itself and would hold the drain). */
  endAll(): void;
}

export function metaService(
  views: ClusterViewPublisher,
  staleViewReason: () => string | null = () => null,
): MetaService {
  const open = new Set<() => void>();
  const implementation: UntypedServiceImplementation = {
    WatchCluster(call: ServerWritableStream<WatchClusterRequest__Output, ClusterView>) {
      // A node that stopped following its cluster (decommissioned) refuses to stream a view
      // that no longer changes, at the start and as soon as it stops: the client watches
      // another node.
      const refused = (): boolean => {
        const why = staleViewReason();
        if (why === null) return false;
        const answer = toServiceError(new NotMemberError(why, true));
        // Who runs here, as a view would say: a probe (probeMember) must still see this node.
        const { cluster_id, incarnation } = views.current();
        answer.metadata?.set(CLUSTER_ID_KEY, cluster_id);
        answer.metadata?.set(INCARNATION_KEY, incarnation);
        call.emit("error", answer);
        return true;
      };
      if (refused()) return;
      let unsubscribe: (() => void) | null = null;
      const finish = (): void => {
        unsubscribe?.();
        unsubscribe = null;
        open.delete(end);
      };
      // A watcher that does not read gets the latest view when it does, not every one since:
      // each view is whole, and written regardless they piled up in the stream's buffer, a
      // view (tens of KB) up to ten times a second while the cluster changes.
      let waiting: ClusterView | null = null;
      let blocked = false;
      const send = (view: ClusterView): void => {
        if (blocked) {
          waiting = view;
          return;
        }
        if (call.write(view)) return;
        blocked = true;
        call.once("drain", () => {
          blocked = false;
          const latest = waiting;
          waiting = null;
          if (latest !== null && unsubscribe !== null) send(latest);
        });
      };
      unsubscribe = views.subscribe((view) => {
        if (refused()) finish();
        else send(view);
      });
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
