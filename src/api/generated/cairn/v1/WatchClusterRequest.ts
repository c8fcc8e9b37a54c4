// Original file: proto/cairn/v1/meta.proto


export interface WatchClusterRequest {
}

export interface WatchClusterRequest__Output {
}
