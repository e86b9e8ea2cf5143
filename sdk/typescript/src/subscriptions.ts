import { Code, createClient, type Client } from "@connectrpc/connect";
import { context } from "@opentelemetry/api";

import { Caller, transportFor, type CallOptions, type RivoraClientOptions } from "./call.js";
import { RivoraError } from "./errors.js";
import { EventTypeService, SubscriptionService, type EventType, type Subscription } from "./gen/rivora/v1/subscriptions_pb.js";

/** A custom HTTP header to send with a subscription's deliveries. */
export interface HeaderValue {
  name: string;
  value: string;
}

/** What `create` makes. */
export interface NewSubscription {
  customerId: string;
  destinationId: string;
  /** Exact event types and globs where "*" is any run of characters ("order.*"; "*" for all). */
  types: string[];
  /** A CEL expression over data, type, customer and lane that must be true, e.g. `data.amount > 100`. */
  filter?: string;
  /** Deliver to this path (and query) on the destination's URL. Set `path` or `url`, not both. */
  path?: string;
  /** Deliver to this full URL on the destination's origin (same scheme, host and port). */
  url?: string;
  /** This subscription's own signing secret ("whsec_…"); the destination's signs otherwise. */
  secret?: string;
  /** Have a secret generated; `create`'s answer shows it, once. */
  generateSecret?: boolean;
  headers?: HeaderValue[];
  description?: string;
}

/** What `update` changes: only the fields present. */
export interface SubscriptionChange {
  /** Replace the types. */
  types?: string[];
  /** Replace the filter ("" removes it). */
  filter?: string;
  /** Replace where deliveries go; `path: ""` and `url: ""` together send them to the destination's URL again. */
  path?: string;
  url?: string;
  setHeaders?: HeaderValue[];
  removeHeaders?: string[];
  description?: string;
}

/** What `list` selects; absent fields do not filter. */
export interface SubscriptionFilter {
  customerId?: string;
  destinationId?: string;
}

/** A subscription with its count of pending (undelivered, unarchived) events, as `get` answers. */
export interface SubscriptionDetail {
  subscription: Subscription;
  pending: number;
}

/**
 * SubscriptionClient manages subscriptions through the control plane's
 * SubscriptionService and reads its event-type catalogue: the self-service
 * a customer token allows (its own customers' subscriptions only; another
 * customer's answer NotFound, as absent ids do), and all of it for
 * operators and admins. Every failure rejects with a `RivoraError`.
 *
 * Reads are retried like publishes. Changes are tried once: one whose
 * answer was lost may have been applied, so read the subscription back
 * (`get`) before trying again.
 */
export class SubscriptionClient {
  readonly #subs: Client<typeof SubscriptionService>;
  readonly #types: Client<typeof EventTypeService>;
  readonly #caller: Caller;

  /** `options.baseUrl` is the control plane (with `rivora dev`, the same address as the agent). */
  constructor(options: RivoraClientOptions) {
    const transport = transportFor(options);
    this.#subs = createClient(SubscriptionService, transport);
    this.#types = createClient(EventTypeService, transport);
    this.#caller = new Caller(options);
  }

  /** create makes a subscription: from now on the customer's matching events that name no destination go through it. */
  async create(s: NewSubscription, options: CallOptions = {}): Promise<Subscription> {
    const res = await this.#caller.once("rivora create subscription", context.active(), options, (o) =>
      this.#subs.createSubscription({ ...s, headers: s.headers ?? [] }, o),
    );
    return present(res.subscription, "subscription");
  }

  /** get returns one subscription and how many of its events are pending. */
  async get(id: string, options: CallOptions = {}): Promise<SubscriptionDetail> {
    const res = await this.#caller.retry(`rivora get subscription ${JSON.stringify(id)}`, context.active(), options, (o) =>
      this.#subs.getSubscription({ id }, o),
    );
    return { subscription: present(res.subscription, "subscription"), pending: Number(res.pending) };
  }

  /** list returns the subscriptions `filter` selects (a customer token: only its customers'). */
  async list(filter: SubscriptionFilter = {}, options: CallOptions = {}): Promise<Subscription[]> {
    const res = await this.#caller.retry("rivora list subscriptions", context.active(), options, (o) => this.#subs.listSubscriptions(filter, o));
    return res.subscriptions;
  }

  /** update changes what `change` has and returns the subscription as it now is. */
  async update(id: string, change: SubscriptionChange, options: CallOptions = {}): Promise<Subscription> {
    const { types, setHeaders, removeHeaders, ...rest } = change;
    const req = { id, ...rest, setTypes: types !== undefined, types: types ?? [], setHeaders: setHeaders ?? [], removeHeaders: removeHeaders ?? [] };
    const res = await this.#caller.once(`rivora update subscription ${JSON.stringify(id)}`, context.active(), options, (o) =>
      this.#subs.updateSubscription(req, o),
    );
    return present(res.subscription, "subscription");
  }

  /**
   * pause holds the subscription's events: they keep being accepted and routed to it, nothing is dropped, until `resume`.
   * `reason` is required (a blank one rejects with InvalidArgument): the audit log and `get` say it.
   */
  async pause(id: string, reason: string, options: CallOptions = {}): Promise<Subscription> {
    const res = await this.#caller.once(`rivora pause subscription ${JSON.stringify(id)}`, context.active(), options, (o) =>
      this.#subs.pauseSubscription({ id, reason }, o),
    );
    return present(res.subscription, "subscription");
  }

  /** resume lets a paused subscription's events drain, in lane order. */
  async resume(id: string, options: CallOptions = {}): Promise<Subscription> {
    const res = await this.#caller.once(`rivora resume subscription ${JSON.stringify(id)}`, context.active(), options, (o) =>
      this.#subs.resumeSubscription({ id }, o),
    );
    return present(res.subscription, "subscription");
  }

  /**
   * rotateSecret gives the subscription a new signing secret (`secret`, or
   * generated), shown in the answer's `secret` once; the previous one keeps
   * signing for `graceMs` (absent: Rivora's default, 24 h; 0: no overlap).
   */
  async rotateSecret(id: string, rotation: { secret?: string; graceMs?: number } = {}, options: CallOptions = {}): Promise<Subscription> {
    const req = { id, secret: rotation.secret ?? "", ...(rotation.graceMs === undefined ? {} : { grace: duration(rotation.graceMs) }) };
    const res = await this.#caller.once(`rivora rotate the secret of subscription ${JSON.stringify(id)}`, context.active(), options, (o) =>
      this.#subs.rotateSubscriptionSecret(req, o),
    );
    return present(res.subscription, "subscription");
  }

  /**
   * delete deletes the subscription. It is refused (FailedPrecondition)
   * while its events are pending, unless `force`: then they are archived as
   * dead letters (reason "deleted"), and `archived` counts them.
   */
  async delete(id: string, { force = false }: { force?: boolean } = {}, options: CallOptions = {}): Promise<{ archived: number }> {
    const res = await this.#caller.once(`rivora delete subscription ${JSON.stringify(id)}`, context.active(), options, (o) =>
      this.#subs.deleteSubscription({ id, force }, o),
    );
    return { archived: Number(res.archived) };
  }

  /** eventTypes lists the catalogue: what may be subscribed to (deprecated types only with `includeDeprecated`). */
  async eventTypes({ includeDeprecated = false }: { includeDeprecated?: boolean } = {}, options: CallOptions = {}): Promise<EventType[]> {
    const res = await this.#caller.retry("rivora list event types", context.active(), options, (o) => this.#types.listEventTypes({ includeDeprecated }, o));
    return res.eventTypes;
  }

  /** eventType returns one type of the catalogue, with its JSON Schema. */
  async eventType(name: string, options: CallOptions = {}): Promise<EventType> {
    const res = await this.#caller.retry(`rivora get event type ${JSON.stringify(name)}`, context.active(), options, (o) =>
      this.#types.getEventType({ name }, o),
    );
    return present(res.eventType, "event type");
  }
}

// present is an answer's message, which the server always sets.
function present<T>(m: T | undefined, what: string): T {
  if (m === undefined) throw new RivoraError(Code.Internal, `rivora: the server's answer has no ${what}`);
  return m;
}

// duration is a grace in milliseconds as a protobuf Duration. A negative,
// NaN or infinite grace is refused here, as the server would refuse it:
// clamping a negative one to 0 stopped the old secret at once.
function duration(ms: number): { seconds: bigint; nanos: number } {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) {
    throw new RivoraError(Code.InvalidArgument, `rivora: graceMs must be a finite number of milliseconds, 0 or more (0: no overlap), got ${String(ms)}`);
  }
  const whole = Math.floor(ms);
  return { seconds: BigInt(Math.floor(whole / 1000)), nanos: (whole % 1000) * 1_000_000 };
}
