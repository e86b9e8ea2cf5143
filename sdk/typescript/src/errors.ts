import { Code, ConnectError } from "@connectrpc/connect";

/**
 * RivoraError is every failure of a {@link RivoraClient} call: `code` is the
 * Connect code (compare with `Code.Unavailable`, …, re-exported by this
 * package), `cause` the underlying error (a `ConnectError` from the server
 * or the transport), `attempts` how many tries were made.
 */
export class RivoraError extends Error {
  override readonly name = "RivoraError";
  readonly code: Code;
  /**
   * The message without the `[code]` prefix: what the call was, then the
   * server's (or transport's) words, e.g. `rivora publish: destination
   * "orders" is not registered`.
   */
  readonly rawMessage: string;
  /** Tries made before giving up (0 when the call was refused before any). */
  readonly attempts: number;

  constructor(code: Code, message: string, options?: { cause?: unknown; attempts?: number }) {
    super(`[${codeName(code)}] ${message}`, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.rawMessage = message;
    this.attempts = options?.attempts ?? 0;
  }

  /** The code's name as the Connect protocol spells it, e.g. "unavailable". */
  get codeName(): string {
    return codeName(this.code);
  }
}

/** codeName spells a code as the Connect protocol does ("resource_exhausted"). */
export function codeName(code: Code): string {
  const name = Code[code] as string | undefined;
  return name === undefined ? `code_${code}` : name.replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
}

/**
 * toRivoraError wraps any failure of a try, keeping its code; a network
 * failure (fetch's TypeError, which Connect reports as Unknown) is
 * Unavailable, as connect-go reports it.
 */
export function toRivoraError(what: string, err: unknown, attempts: number): RivoraError {
  const ce = ConnectError.from(err);
  const code = isNetworkError(ce) ? Code.Unavailable : ce.code;
  return new RivoraError(code, `${what}: ${ce.rawMessage}${causeOf(ce)}`, { cause: err, attempts });
}

/**
 * isNetworkError: fetch rejects with a TypeError when the network fails
 * (refused, reset, closed mid-answer), in Node and browsers alike.
 */
export function isNetworkError(ce: ConnectError): boolean {
  return ce.code === Code.Unknown && ce.cause instanceof TypeError;
}

// causeOf names what Node's fetch hides behind "fetch failed" (ECONNREFUSED…).
function causeOf(ce: ConnectError): string {
  if (!isNetworkError(ce)) return "";
  const inner = (ce.cause as { cause?: unknown }).cause;
  return inner instanceof Error ? ` (${inner.message})` : "";
}
