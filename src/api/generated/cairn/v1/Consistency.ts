// Original file: proto/cairn/v1/kv.proto

export const Consistency = {
  LINEARIZABLE: 'LINEARIZABLE',
  SERIALIZABLE: 'SERIALIZABLE',
} as const;

export type Consistency =
  | 'LINEARIZABLE'
  | 0
  | 'SERIALIZABLE'
  | 1

export type Consistency__Output = typeof Consistency[keyof typeof Consistency]
