/** Request validation against the configured limits; violations name the limit (design.md §2). */
import type { Version } from "../replication/index.ts";
import { InvalidArgumentError } from "./errors.ts";

export interface Limits {
  readonly maxKeyBytes: number;
  readonly maxValueBytes: number;
}

export function checkKey(key: Uint8Array | undefined, limits: Limits, field = "key"): Uint8Array {
  if (key === undefined || key.length === 0)
    throw new InvalidArgumentError(`${field} must not be empty`);
  if (key.length > limits.maxKeyBytes) {
    throw new InvalidArgumentError(
      `${field} is ${key.length} bytes; the limit is ${limits.maxKeyBytes} bytes (limits.max_key_bytes)`,
    );
  }
  return key;
}

export function checkValue(value: Uint8Array | undefined, limits: Limits): Uint8Array {
  const v = value ?? new Uint8Array(0);
  if (v.length > limits.maxValueBytes) {
    throw new InvalidArgumentError(
      `value is ${v.length} bytes; the limit is ${limits.maxValueBytes} bytes (limits.max_value_bytes)`,
    );
  }
  return v;
}

/** An expected version from the wire; {0, 0} means "must not exist"; a half-set one is invalid. */
export function checkExpected(
  v: { index?: number; term?: number } | null | undefined,
): Version | undefined {
  if (v === null || v === undefined) return undefined;
  const index = v.index ?? 0;
  const term = v.term ?? 0;
  if (!Number.isSafeInteger(index) || !Number.isSafeInteger(term) || index < 0 || term < 0) {
    throw new InvalidArgumentError(
      "expected_version: index and term must be non-negative integers",
    );
  }
  if ((index === 0) !== (term === 0)) {
    throw new InvalidArgumentError(
      "expected_version: index and term are both set (a version) or both 0 (the key must not exist)",
    );
  }
  return { index, term };
}

/**
 * A request's enum field as proto-loader decodes it (`enums: String`): the value's name, or the
 * number itself when the sender used a value the schema does not define. An unknown value is
 * refused, never read as the default (a `consistency` of 7 is not a linearizable read).
 */
export function checkEnum<T extends string>(value: unknown, names: readonly T[], field: string): T {
  if (typeof value === "string" && (names as readonly string[]).includes(value)) return value as T;
  throw new InvalidArgumentError(
    `${field} is ${typeof value === "number" || typeof value === "string" ? value : typeof value}; it must be one of ${names.join(", ")}`,
  );
}

export const CONSISTENCIES = ["LINEARIZABLE", "SERIALIZABLE"] as const;
