/**
 * @rivora/sdk: publish events to Rivora (to a destination, or fanned out to
 * a customer's subscriptions), manage subscriptions, and verify the signed
 * webhooks Rivora delivers. The generated Connect descriptors are under
 * "@rivora/sdk/gen/…".
 */
export {
  RivoraClient,
  DEFAULT_BASE_BACKOFF_MS,
  DEFAULT_MAX_ATTEMPTS,
  DEFAULT_TIMEOUT_MS,
  type CallOptions,
  type Payload,
  type PublishBatchResult,
  type PublishEvent,
  type PublishResult,
  type RivoraClientOptions,
  type Route,
} from "./client.js";
export {
  SubscriptionClient,
  type HeaderValue,
  type NewSubscription,
  type SubscriptionChange,
  type SubscriptionDetail,
  type SubscriptionFilter,
} from "./subscriptions.js";
export type { EventType, Subscription } from "./gen/rivora/v1/subscriptions_pb.js";
export { RivoraError, codeName, edgeBufferFull, edgeBufferTooOld, invalidEvent, keyReused, type KeyReuse } from "./errors.js";
export { eventId, newIdempotencyKey, subscriptionEventId } from "./ids.js";
export {
  verifyWebhook,
  signWebhook,
  WebhookVerificationError,
  DEFAULT_TOLERANCE_SECONDS,
  HEADER_ID,
  HEADER_SIGNATURE,
  HEADER_TIMESTAMP,
  SECRET_PREFIX,
  PUBLIC_KEY_PREFIX,
  MAX_SIGNATURES,
  type VerifiedWebhook,
  type VerifyWebhookOptions,
  type WebhookBody,
  type WebhookHeaders,
  type WebhookVerificationReason,
} from "./webhook.js";
export { Code } from "@connectrpc/connect";
