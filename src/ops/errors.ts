import { CairnError } from "../common/index.ts";

/**
 * A server could not bind its address at start because another process holds it. Names the
 * address and the setting (`http_addr`, `rpc_addr`) so the operator knows what to change; the CLI
 * exits with code 1.
 */
export class AddressInUseError extends CairnError {
  readonly address: string;
  readonly setting: string;

  constructor(address: string, setting: string, options: { cause?: unknown } = {}) {
    super(
      "CAIRN_ERR_ADDRESS_IN_USE",
      `address ${address} is already in use (${setting}); stop the other process or set ${setting} to a free address`,
      options,
    );
    this.name = "AddressInUseError";
    this.address = address;
    this.setting = setting;
  }
}

/** Any other failure to bind (permission denied, address not on this host, ...); exit code 1. */
export class BindError extends CairnError {
  readonly address: string;
  readonly setting: string;

  constructor(address: string, setting: string, reason: string, options: { cause?: unknown } = {}) {
    super("CAIRN_ERR_BIND", `cannot listen on ${address} (${setting}): ${reason}`, options);
    this.name = "BindError";
    this.address = address;
    this.setting = setting;
  }
}

/** The CairnError for a failed `listen`/`bind` of `address`, configured by `setting`. */
export function bindErrorFor(err: unknown, address: string, setting: string): CairnError {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  if (code === "EADDRINUSE") return new AddressInUseError(address, setting, { cause: err });
  const reason =
    code === "EACCES"
      ? "permission denied (ports below 1024 need privileges)"
      : code === "EADDRNOTAVAIL"
        ? "the address is not available on this host"
        : err instanceof Error
          ? err.message
          : String(err);
  return new BindError(address, setting, reason, { cause: err });
}
