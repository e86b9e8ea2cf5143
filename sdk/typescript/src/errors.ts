import { create, createFileRegistry, type Message } from "@bufbuild/protobuf";
import type { GenMessage } from "@bufbuild/protobuf/codegenv2";
import { FieldDescriptorProto_Label, FieldDescriptorProto_Type, FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
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

/** What {@link keyReused} reads from a publish refused for reusing a key. */
export interface KeyReuse {
  /** The event the key already names. */
  originalEventId: string;
  /** The key that was reused. */
  idempotencyKey: string;
  /** The refused event's place in a `publishBatch`; -1 for a `publish`. */
  index: number;
}

/**
 * keyReused tells the `AlreadyExists` answer to a publish that reused an
 * idempotency key for another event (another payload, type, lane or
 * content type) within the dedup window, reading the error's
 * `google.rpc.ErrorInfo` (reason `IDEMPOTENCY_KEY_REUSED`): the event the
 * key already names, the key, and in a batch the refused event's index.
 * It is undefined for any other error, and for a fan-out's reused key (a
 * publish without destination), which names no single original. The Go
 * SDK's `sdk.KeyReused`.
 */
export function keyReused(err: unknown): KeyReuse | undefined {
  const ce = connectErrorOf(err);
  if (ce === undefined || ce.code !== Code.AlreadyExists) return undefined;
  const info = errorInfo(ce, KEY_REUSED_REASON);
  if (info === undefined) return undefined;
  const index = info.metadata["index"];
  return {
    originalEventId: info.metadata["original_event_id"] ?? "",
    idempotencyKey: info.metadata["idempotency_key"] ?? "",
    index: index !== undefined && /^[0-9]+$/.test(index) ? Number(index) : -1,
  };
}

/**
 * invalidEvent tells the `InvalidArgument` answer to a `publishBatch`
 * refused for one of its events (nothing of the batch was stored), reading
 * the error's `google.rpc.ErrorInfo` (reason `INVALID_EVENT`): the event's
 * index in the batch. The message says what is wrong with it. It is
 * undefined for any other error. The Go SDK's `sdk.InvalidEvent`.
 */
export function invalidEvent(err: unknown): number | undefined {
  const ce = connectErrorOf(err);
  if (ce === undefined || ce.code !== Code.InvalidArgument) return undefined;
  const index = errorInfo(ce, INVALID_EVENT_REASON)?.metadata["index"];
  return index !== undefined && /^[0-9]+$/.test(index) ? Number(index) : undefined;
}

/**
 * edgeBufferFull tells the `ResourceExhausted` answer of an edge
 * (`rivora edge`) whose buffer has no room for the request, reading the
 * error's `google.rpc.ErrorInfo` (reason `EDGE_BUFFER_FULL`), and names
 * the edge. Nothing of the request was stored unless the answer says its
 * events may have been (the store itself found the buffer full part-way):
 * retrying with the same idempotency keys is safe either way. It is
 * back-pressure, retried like any other, but it lasts: the edge takes
 * events again only as the cell takes its buffer, which needs its link to
 * the cell. When the tries run out, publish to the cell instead, or hold
 * the events. It is undefined for any other error (an agent's or an
 * edge's ordinary overload included). The Go SDK's `sdk.EdgeBufferFull`.
 */
export function edgeBufferFull(err: unknown): string | undefined {
  return edgeRefusal(err, EDGE_BUFFER_FULL_REASON);
}

/**
 * edgeBufferTooOld tells the `ResourceExhausted` answer of an edge that
 * takes no more events because the oldest its buffer has not forwarded
 * is older than its `--buffer-max-age`, reading the error's
 * `google.rpc.ErrorInfo` (reason `EDGE_BUFFER_TOO_OLD`), and names the
 * edge. Nothing of the request was stored. Like {@link edgeBufferFull}
 * it is back-pressure that lasts until the cell takes the buffer's
 * oldest events: when the tries run out, publish to the cell instead, or
 * hold the events. It is undefined for any other error. The Go SDK's
 * `sdk.EdgeBufferTooOld`.
 */
export function edgeBufferTooOld(err: unknown): string | undefined {
  return edgeRefusal(err, EDGE_BUFFER_TOO_OLD_REASON);
}

// edgeRefusal is the edge named by err's ErrorInfo of this reason, on a
// ResourceExhausted answer ("" when it names none), or undefined.
function edgeRefusal(err: unknown, reason: string): string | undefined {
  const ce = connectErrorOf(err);
  if (ce === undefined || ce.code !== Code.ResourceExhausted) return undefined;
  const info = errorInfo(ce, reason);
  return info === undefined ? undefined : (info.metadata["edge"] ?? "");
}

// The ErrorInfo reasons Rivora's answers carry, in its domain (the Go
// server's agent/ingest KeyReusedReason, RequestTooLargeReason and
// InvalidEventReason, edge's BufferFullReason and BufferTooOldReason, and
// internal/errkind.Domain).
const KEY_REUSED_REASON = "IDEMPOTENCY_KEY_REUSED";
const INVALID_EVENT_REASON = "INVALID_EVENT";
const EDGE_BUFFER_FULL_REASON = "EDGE_BUFFER_FULL";
const EDGE_BUFFER_TOO_OLD_REASON = "EDGE_BUFFER_TOO_OLD";
export const REQUEST_TOO_LARGE_REASON = "REQUEST_TOO_LARGE";
const ERROR_DOMAIN = "rivora.dev";

/** google.rpc.ErrorInfo, as error_details.proto defines it. */
export type ErrorInfo = Message<"google.rpc.ErrorInfo"> & {
  reason: string;
  domain: string;
  metadata: { [key: string]: string };
};

// ErrorInfoSchema describes google.rpc.ErrorInfo, so that findDetails
// decodes the details of Connect errors. Neither @bufbuild/protobuf nor
// @connectrpc/connect ship google/rpc's types, and generating them into
// proto/ would register a second copy of the Go ones: the descriptor is
// built here, with the proto's names and field numbers.
export const ErrorInfoSchema = createFileRegistry(
  create(FileDescriptorProtoSchema, {
    name: "google/rpc/error_details.proto",
    package: "google.rpc",
    syntax: "proto3",
    messageType: [
      {
        name: "ErrorInfo",
        field: [
          { name: "reason", jsonName: "reason", number: 1, label: FieldDescriptorProto_Label.OPTIONAL, type: FieldDescriptorProto_Type.STRING },
          { name: "domain", jsonName: "domain", number: 2, label: FieldDescriptorProto_Label.OPTIONAL, type: FieldDescriptorProto_Type.STRING },
          {
            name: "metadata",
            jsonName: "metadata",
            number: 3,
            label: FieldDescriptorProto_Label.REPEATED,
            type: FieldDescriptorProto_Type.MESSAGE,
            typeName: ".google.rpc.ErrorInfo.MetadataEntry",
          },
        ],
        nestedType: [
          {
            name: "MetadataEntry",
            field: [
              { name: "key", jsonName: "key", number: 1, label: FieldDescriptorProto_Label.OPTIONAL, type: FieldDescriptorProto_Type.STRING },
              { name: "value", jsonName: "value", number: 2, label: FieldDescriptorProto_Label.OPTIONAL, type: FieldDescriptorProto_Type.STRING },
            ],
            options: { mapEntry: true },
          },
        ],
      },
    ],
  }),
  () => undefined,
).getMessage("google.rpc.ErrorInfo") as GenMessage<ErrorInfo>;

/**
 * errorInfo is the ErrorInfo of Rivora's domain with this reason that err
 * (a ConnectError, or a RivoraError caused by one) carries, or undefined.
 */
export function errorInfo(err: unknown, reason: string): ErrorInfo | undefined {
  return connectErrorOf(err)
    ?.findDetails(ErrorInfoSchema)
    .find((info) => info.reason === reason && info.domain === ERROR_DOMAIN);
}

// connectErrorOf is the server's (or transport's) error: err itself, or
// what a RivoraError wraps.
function connectErrorOf(err: unknown): ConnectError | undefined {
  const inner = err instanceof RivoraError ? err.cause : err;
  return inner instanceof ConnectError ? inner : undefined;
}
