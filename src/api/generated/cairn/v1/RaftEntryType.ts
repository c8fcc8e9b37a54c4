// Original file: proto/cairn/v1/raft.proto

export const RaftEntryType = {
  RAFT_ENTRY_TYPE_NORMAL: 'RAFT_ENTRY_TYPE_NORMAL',
  RAFT_ENTRY_TYPE_CONF_CHANGE: 'RAFT_ENTRY_TYPE_CONF_CHANGE',
} as const;

export type RaftEntryType =
  | 'RAFT_ENTRY_TYPE_NORMAL'
  | 0
  | 'RAFT_ENTRY_TYPE_CONF_CHANGE'
  | 1

export type RaftEntryType__Output = typeof RaftEntryType[keyof typeof RaftEntryType]
