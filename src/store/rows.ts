import type { DeliveryStatus, TaskPhase, TaskStatus } from "../statuses.js";

/**
 * The rows the store hands out and takes, owned by the contract (as River's rivertype): both
 * drivers map to these. The SQLite schema (src/db/sqlite/schema.ts) and the PostgreSQL schema
 * (src/db/pg/schema.ts) are held to them by test/unit/schema-parity.test.ts (checked by tsc), so a
 * column added to a schema and not here, or the other way round, fails the build's type check.
 * `New…Row` are what an insert takes: columns with a default or that may be null are optional.
 * Timestamps are epoch milliseconds; `…Json` columns hold JSON text.
 */

export type TaskRow = {
  id: string;
  clientId: string;
  type: "image" | "video";
  model: string;
  status: TaskStatus;
  phase: TaskPhase;
  requestJson: string;
  callbackUrl: string | null;
  callbackEvents: string;
  metadataJson: string | null;
  idempotencyKey: string;
  requestHash: string;
  upstreamAccount: string;
  upstreamIdempotencyKey: string;
  upstreamTaskId: string | null;
  outputJson: string | null;
  pointsCharged: number | null;
  pointsRefunded: number | null;
  errorJson: string | null;
  pointsReserved: number;
  priceKey: string;
  conflictSince: number | null;
  eventSequence: number;
  submitAttempts: number;
  pollCount: number;
  nextRunAt: number | null;
  claimedUntil: number | null;
  claimToken: string | null;
  expiresAt: number | null;
  createdAt: number;
  updatedAt: number;
  submittedAt: number | null;
  completedAt: number | null;
  callbackHeaders: string | null;
  filesJson: string | null;
  storedBytes: number;
  traceparent: string | null;
  tracestate: string | null;
  /** A long output's pieces (OutputStore), when output_json is left null for it; null otherwise. */
  outputRef: string | null;
};

export type NewTaskRow = {
  id: string;
  clientId: string;
  type: "image" | "video";
  model: string;
  status: TaskStatus;
  phase: TaskPhase;
  requestJson: string;
  callbackUrl?: string | null | undefined;
  callbackEvents: string;
  metadataJson?: string | null | undefined;
  idempotencyKey: string;
  requestHash: string;
  upstreamAccount: string;
  upstreamIdempotencyKey: string;
  upstreamTaskId?: string | null | undefined;
  outputJson?: string | null | undefined;
  pointsCharged?: number | null | undefined;
  pointsRefunded?: number | null | undefined;
  errorJson?: string | null | undefined;
  pointsReserved?: number | undefined;
  priceKey?: string | undefined;
  conflictSince?: number | null | undefined;
  eventSequence?: number | undefined;
  submitAttempts?: number | undefined;
  pollCount?: number | undefined;
  nextRunAt?: number | null | undefined;
  claimedUntil?: number | null | undefined;
  claimToken?: string | null | undefined;
  expiresAt?: number | null | undefined;
  createdAt: number;
  updatedAt: number;
  submittedAt?: number | null | undefined;
  completedAt?: number | null | undefined;
  callbackHeaders?: string | null | undefined;
  filesJson?: string | null | undefined;
  storedBytes?: number | undefined;
  traceparent?: string | null | undefined;
  tracestate?: string | null | undefined;
  outputRef?: string | null | undefined;
};

export type EventRow = {
  seq: number;
  id: string;
  clientId: string;
  clientSeq: number;
  taskId: string;
  type: string;
  sequence: number;
  payload: string;
  callbackUrl: string | null;
  destinationHost: string;
  callbackHeaders: string | null;
  traceparent: string | null;
  tracestate: string | null;
  deliveryStatus: DeliveryStatus;
  webhookId: string | null;
  endpointId: string | null;
  attempts: number;
  roundAttempts: number;
  nextAttemptAt: number | null;
  claimedUntil: number | null;
  claimToken: string | null;
  lastAttemptAt: number | null;
  lastStatusCode: number | null;
  lastError: string | null;
  deliveredAt: number | null;
  failedAt: number | null;
  createdAt: number;
};

/**
 * An event as a delivery claim returns it: what an attempt reads (its message, destination, lease
 * token and retry counts), without the delivery record's own columns. The claims' RETURNING names
 * only these, so a claim builds small rows (the whole row cost the refill claim three times as much).
 */
export type ClaimedEvent = Omit<
  EventRow,
  | "clientSeq"
  | "sequence"
  | "deliveryStatus"
  | "lastAttemptAt"
  | "lastStatusCode"
  | "lastError"
  | "deliveredAt"
  | "failedAt"
>;

export type NewEventRow = {
  seq?: number | undefined;
  id: string;
  clientId: string;
  clientSeq?: number | undefined;
  taskId: string;
  type: string;
  sequence: number;
  payload: string;
  callbackUrl?: string | null | undefined;
  destinationHost?: string | undefined;
  callbackHeaders?: string | null | undefined;
  traceparent?: string | null | undefined;
  tracestate?: string | null | undefined;
  deliveryStatus: DeliveryStatus;
  webhookId?: string | null | undefined;
  endpointId?: string | null | undefined;
  attempts?: number | undefined;
  roundAttempts?: number | undefined;
  nextAttemptAt?: number | null | undefined;
  claimedUntil?: number | null | undefined;
  claimToken?: string | null | undefined;
  lastAttemptAt?: number | null | undefined;
  lastStatusCode?: number | null | undefined;
  lastError?: string | null | undefined;
  deliveredAt?: number | null | undefined;
  failedAt?: number | null | undefined;
  createdAt: number;
};

/** A client's subscribed URL (webhook_endpoints); `events` is a JSON list, `headers` sealed JSON. */
export type WebhookEndpointRow = {
  id: string;
  clientId: string;
  url: string;
  destinationHost: string;
  events: string;
  description: string | null;
  headers: string | null;
  /** `webhook`, `amqp`, `nats` or `sqs`. */
  kind: string;
  /** A queue kind's settings as JSON, its credentials sealed inside (services/queue-endpoints.ts); null for `webhook`. */
  destination: string | null;
  createdAt: number;
};

export type NewWebhookEndpointRow = {
  id: string;
  clientId: string;
  url: string;
  destinationHost: string;
  events: string;
  description?: string | null | undefined;
  headers?: string | null | undefined;
  kind?: string | undefined;
  destination?: string | null | undefined;
  createdAt: number;
};

export type AttemptRow = {
  id: string;
  eventId: string;
  taskId: string;
  clientId: string;
  eventType: string;
  url: string;
  attemptedAt: number;
  statusCode: number | null;
  latencyMs: number | null;
  outcome: string;
  error: string | null;
  responseBody: string | null;
};

export type NewAttemptRow = {
  id: string;
  eventId: string;
  taskId: string;
  clientId: string;
  eventType: string;
  url: string;
  attemptedAt: number;
  statusCode?: number | null | undefined;
  latencyMs?: number | null | undefined;
  outcome: string;
  error?: string | null | undefined;
  responseBody?: string | null | undefined;
};

export type ClientRow = {
  id: string;
  name: string;
  apiKeyHash: string;
  apiKeyPrefix: string;
  webhookSecret: string;
  previousWebhookSecret: string | null;
  previousSecretExpiresAt: number | null;
  upstreamKeyEncrypted: string | null;
  upstreamAccount: string;
  maxWaiting: number | null;
  maxRunning: number | null;
  creditLimit: number | null;
  /**
   * The books as stored on the row. On PostgreSQL only what is rolled up so far (db/pg/credit-books.ts):
   * the client's position is ClientStore.creditPosition, never these three fields.
   */
  pointsCharged: number;
  pointsRefunded: number;
  pointsReserved: number;
  eventSeq: number;
  lastAdmittedAt: number;
  createdAt: number;
  revokedAt: number | null;
  notificationUrl: string | null;
  callbackHeaders: string | null;
  signatureScheme: "hmac" | "ed25519";
  signingKey: string | null;
  previousSigningKey: string | null;
  previousSigningKeyExpiresAt: number | null;
  previousSchemeExpiresAt: number | null;
  storageConfig: string | null;
};

export type NewClientRow = {
  id: string;
  name: string;
  apiKeyHash: string;
  apiKeyPrefix: string;
  webhookSecret: string;
  previousWebhookSecret?: string | null | undefined;
  previousSecretExpiresAt?: number | null | undefined;
  upstreamKeyEncrypted?: string | null | undefined;
  upstreamAccount?: string | undefined;
  maxWaiting?: number | null | undefined;
  maxRunning?: number | null | undefined;
  creditLimit?: number | null | undefined;
  pointsCharged?: number | undefined;
  pointsRefunded?: number | undefined;
  pointsReserved?: number | undefined;
  eventSeq?: number | undefined;
  lastAdmittedAt?: number | undefined;
  createdAt: number;
  revokedAt?: number | null | undefined;
  notificationUrl?: string | null | undefined;
  callbackHeaders?: string | null | undefined;
  signatureScheme?: "hmac" | "ed25519" | undefined;
  signingKey?: string | null | undefined;
  previousSigningKey?: string | null | undefined;
  previousSigningKeyExpiresAt?: number | null | undefined;
  previousSchemeExpiresAt?: number | null | undefined;
  storageConfig?: string | null | undefined;
};

export type SessionRow = {
  tokenHash: string;
  clientId: string;
  csrfToken: string;
  createdAt: number;
  lastSeenAt: number;
  expiresAt: number;
  revokedAt: number | null;
};

export type NewSessionRow = {
  tokenHash: string;
  clientId: string;
  csrfToken: string;
  createdAt: number;
  lastSeenAt: number;
  expiresAt: number;
  revokedAt?: number | null | undefined;
};

export type UpstreamAccountRow = {
  id: string;
  updatedAt: number;
  learnedMaxConcurrent: number | null;
  learnedAt: number | null;
  readsPausedUntil: number | null;
  submitPausedUntil: number | null;
};

export type KeyHealthRow = {
  clientId: string;
  host: string;
  failingSince: number | null;
  failedAttempts: number;
  lastError: string | null;
  lastSuccessAt: number | null;
  noticeSentAt: number | null;
  updatedAt: number;
};

export type NoticeRow = {
  id: string;
  clientId: string;
  type: string;
  payload: string;
  url: string;
  deliveryStatus: DeliveryStatus;
  attempts: number;
  nextAttemptAt: number | null;
  claimedUntil: number | null;
  claimToken: string | null;
  lastStatusCode: number | null;
  lastError: string | null;
  deliveredAt: number | null;
  createdAt: number;
};

export type NewNoticeRow = {
  id: string;
  clientId: string;
  type: string;
  payload: string;
  url: string;
  deliveryStatus: DeliveryStatus;
  attempts?: number | undefined;
  nextAttemptAt?: number | null | undefined;
  claimedUntil?: number | null | undefined;
  claimToken?: string | null | undefined;
  lastStatusCode?: number | null | undefined;
  lastError?: string | null | undefined;
  deliveredAt?: number | null | undefined;
  createdAt: number;
};

/** Tasks per hour and status (the dashboard's chart). */
export type HourlyCount = {
  /** Start of the hour, ms since the epoch. */
  hour: number;
  status: TaskStatus;
  n: number;
};
