import { sql } from "drizzle-orm";
import { blob, index, integer, primaryKey, sqliteTable, text, uniqueIndex } from "drizzle-orm/sqlite-core";
import { DELIVERY_STATUSES, TASK_PHASES, TASK_STATUSES } from "../../statuses.js";

/**
 * Every timestamp is integer milliseconds since the epoch, taken from the injected clock.
 * Leases: `claimed_until` + `claim_token`; a worker completes a row only WHERE its token still holds.
 */

export const clients = sqliteTable(
  "clients",
  {
    id: text("id").primaryKey(),
    name: text("name").notNull(),
    /** SHA-256 (hex) of the API key; the key itself is never stored. */
    apiKeyHash: text("api_key_hash").notNull(),
    /** First characters of the key, to recognise it in `clients list`. */
    apiKeyPrefix: text("api_key_prefix").notNull(),
    webhookSecret: text("webhook_secret").notNull(),
    /** The secret replaced by the last rotation; it keeps signing until previous_secret_expires_at. */
    previousWebhookSecret: text("previous_webhook_secret"),
    previousSecretExpiresAt: integer("previous_secret_expires_at"),
    /** AES-256-GCM ciphertext of a client-owned upstream key (base64 iv.tag.data), or null for the default account. */
    upstreamKeyEncrypted: text("upstream_key_encrypted"),
    /** Identifies the upstream account this client's tasks run on: "default" or "cli_…". */
    upstreamAccount: text("upstream_account").notNull().default("default"),
    maxWaiting: integer("max_waiting"),
    maxRunning: integer("max_running"),
    creditLimit: integer("credit_limit"),
    /**
     * The credit ledger's running totals (see credit_ledger): they survive retention pruning of
     * task rows. `points_reserved` is held by the client's waiting and in-flight tasks.
     */
    pointsCharged: integer("points_charged").notNull().default(0),
    pointsRefunded: integer("points_refunded").notNull().default(0),
    pointsReserved: integer("points_reserved").notNull().default(0),
    /** Events written for this client; the next event's client_seq is this + 1 (the pull feed's order). */
    eventSeq: integer("event_seq").notNull().default(0),
    /** Round-robin admission: when a task of this client was last submitted upstream. */
    lastAdmittedAt: integer("last_admitted_at").notNull().default(0),
    createdAt: integer("created_at").notNull(),
    revokedAt: integer("revoked_at"),
    /** Where operational notices go (endpoint.failing, endpoint.recovered, delivery.exhausted); null: none. */
    notificationUrl: text("notification_url"),
    /** Default callback headers for every task (JSON object), sealed with RELAY_ENCRYPTION_KEY when set. */
    callbackHeaders: text("callback_headers"),
    /** How webhooks are signed: "hmac" (v1, whsec_) or "ed25519" (v1a, whsk_/whpk_). */
    signatureScheme: text("signature_scheme", { enum: ["hmac", "ed25519"] })
      .notNull()
      .default("hmac"),
    /** The Ed25519 signing key (`whsk_…`), sealed; null until the client first chooses ed25519. */
    signingKey: text("signing_key"),
    /** The signing key replaced by the last rotation; it keeps signing until previous_signing_key_expires_at. */
    previousSigningKey: text("previous_signing_key"),
    previousSigningKeyExpiresAt: integer("previous_signing_key_expires_at"),
    /** After a switch of signature_scheme: until then the other scheme's current key signs beside the new one. */
    previousSchemeExpiresAt: integer("previous_scheme_expires_at"),
    /** The client's S3-compatible bucket for output copies (JSON, sealed: it holds the secret key); null: none. */
    storageConfig: text("storage_config"),
  },
  (t) => [uniqueIndex("clients_api_key_hash_uq").on(t.apiKeyHash)],
);

export const tasks = sqliteTable(
  "tasks",
  {
    id: text("id").primaryKey(),
    clientId: text("client_id")
      .notNull()
      .references(() => clients.id),
    type: text("type", { enum: ["image", "video"] }).notNull(),
    model: text("model").notNull(),
    status: text("status", { enum: TASK_STATUSES }).notNull(),
    phase: text("phase", { enum: TASK_PHASES }).notNull(),
    /** The body sent upstream: the caller's body without the relay's own fields. */
    requestJson: text("request_json").notNull(),
    callbackUrl: text("callback_url"),
    callbackEvents: text("callback_events").notNull(),
    metadataJson: text("metadata_json"),
    idempotencyKey: text("idempotency_key").notNull(),
    requestHash: text("request_hash").notNull(),
    upstreamAccount: text("upstream_account").notNull(),
    /** Derived from the task id at insert and never changed: every submission retry reuses it. */
    upstreamIdempotencyKey: text("upstream_idempotency_key").notNull(),
    upstreamTaskId: text("upstream_task_id"),
    outputJson: text("output_json"),
    pointsCharged: integer("points_charged"),
    pointsRefunded: integer("points_refunded"),
    errorJson: text("error_json"),
    /** Credits held for this task while it waits or runs and its charge is not known yet (docs/contract.md, "Credit limits"). */
    pointsReserved: integer("points_reserved").notNull().default(0),
    /** Model and price-relevant parameters: tasks with the same key cost the same (learned prices). */
    priceKey: text("price_key").notNull().default(""),
    /** First 409 "still being created" answer to this task's own key in the current run of them. */
    conflictSince: integer("conflict_since"),
    /** Number of events written for this task; the next event's sequence is this + 1. */
    eventSequence: integer("event_sequence").notNull().default(0),
    submitAttempts: integer("submit_attempts").notNull().default(0),
    pollCount: integer("poll_count").notNull().default(0),
    /** When the submitter or poller should next look at this task. */
    nextRunAt: integer("next_run_at"),
    claimedUntil: integer("claimed_until"),
    claimToken: text("claim_token"),
    expiresAt: integer("expires_at"),
    createdAt: integer("created_at").notNull(),
    updatedAt: integer("updated_at").notNull(),
    submittedAt: integer("submitted_at"),
    completedAt: integer("completed_at"),
    /** The task's own callback headers (JSON object), sealed with RELAY_ENCRYPTION_KEY when set; never shown. */
    callbackHeaders: text("callback_headers"),
    /** Copies of the output in the client's bucket (JSON array of files), once mirrored. */
    filesJson: text("files_json"),
    /** UTF-8 bytes of the text intake stored for this task (services/request-bounds.ts): its share of client_storage. */
    storedBytes: integer("stored_bytes").notNull().default(0),
    /** W3C trace context the task carries (docs/operations.md, "Tracing"): every upstream call and delivery attempt continues it. */
    traceparent: text("traceparent"),
    tracestate: text("tracestate"),
    /**
     * An output too long for the row (core/stored-output.ts): its pieces in task_output_pieces under
     * this ref, and output_json null. Reads of the row stay small; answers stream the pieces.
     */
    outputRef: text("output_ref"),
  },
  (t) => [
    uniqueIndex("tasks_client_idempotency_uq").on(t.clientId, t.idempotencyKey),
    index("tasks_client_id_idx").on(t.clientId, t.id),
    index("tasks_client_status_idx").on(t.clientId, t.status, t.id),
    index("tasks_phase_due_idx").on(t.phase, t.upstreamAccount, t.nextRunAt),
    index("tasks_phase_next_idx").on(t.phase, t.nextRunAt),
    index("tasks_admission_idx").on(t.phase, t.upstreamAccount, t.clientId, t.nextRunAt),
    index("tasks_phase_expires_idx").on(t.phase, t.expiresAt),
    /** One upstream task id is bound to one relay task (docs/contract.md, "Upstream answers"): a second binding is an upstream defect. */
    uniqueIndex("tasks_upstream_task_uq").on(t.upstreamAccount, t.upstreamTaskId),
    index("tasks_done_completed_idx").on(t.phase, t.completedAt),
    index("tasks_phase_lease_idx").on(t.phase, t.claimedUntil),
    index("tasks_client_phase_idx").on(t.clientId, t.phase),
    // The orphan sweep asks whether any task holds a ref.
    index("tasks_output_ref_idx").on(t.outputRef).where(sql`output_ref IS NOT NULL`),
  ],
);

/**
 * A long output in pieces (core/stored-output.ts), written before the transition that puts its ref
 * on the task, each piece in a short write of its own: no step holds the event loop for the whole
 * text. A ref no task holds is a writer killed before its transition, swept after an hour.
 */
export const taskOutputPieces = sqliteTable(
  "task_output_pieces",
  {
    ref: text("ref").notNull(),
    seq: integer("seq").notNull(),
    /** The last piece is marked, so a reader tells a whole output from one cut short. */
    last: integer("last", { mode: "boolean" }).notNull(),
    text: text("text").notNull(),
    /** The piece's UTF-8 bytes: what it adds to its client's stored bytes (a trigger sums them, never reading the text). */
    bytes: integer("bytes").notNull(),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.ref, t.seq] }), index("task_output_pieces_created_idx").on(t.createdAt)],
);

/**
 * The outbox. An event row is written in the same transaction as the task change that causes it;
 * `seq` (rowid) orders the pull feed, `sequence` orders the events of one task.
 */
export const events = sqliteTable(
  "events",
  {
    seq: integer("seq").primaryKey({ autoIncrement: true }),
    id: text("id").notNull(),
    clientId: text("client_id")
      .notNull()
      .references(() => clients.id),
    /** Position in the client's own pull feed (the opaque cursor encodes it, never the relay-wide seq). */
    clientSeq: integer("client_seq").notNull().default(0),
    taskId: text("task_id")
      .notNull()
      .references(() => tasks.id, { onDelete: "cascade" }),
    type: text("type").notNull(),
    sequence: integer("sequence").notNull(),
    /** The exact JSON body sent on every attempt. */
    payload: text("payload").notNull(),
    callbackUrl: text("callback_url"),
    /** `hostname:port` of callback_url (webhooks/destination), stored so SQL never parses URLs. */
    destinationHost: text("destination_host").notNull().default(""),
    /** The task's callback headers (sealed JSON, copied from the task when the event is written), sent with every attempt. */
    callbackHeaders: text("callback_headers"),
    /** The task's trace context, copied when the event is written: every attempt sends it. */
    traceparent: text("traceparent"),
    tracestate: text("tracestate"),
    deliveryStatus: text("delivery_status", { enum: DELIVERY_STATUSES }).notNull(),
    /**
     * The `webhook-id` this row is sent under when it is not the row's own id: one event reaches
     * the task's callback_url (the row whose id is the event's id, webhook_id null) and each
     * subscribed endpoint (one row each, webhook_id the event's id), with the same id and body.
     */
    webhookId: text("webhook_id"),
    /** The webhook_endpoints row this delivery goes to; null for the task's own callback_url. Not a foreign key: history outlives the endpoint. */
    endpointId: text("endpoint_id"),
    /** Attempts made so far in total (all rounds). */
    attempts: integer("attempts").notNull().default(0),
    /** Position in the retry schedule of the current round; redelivery and recovery start a new round. */
    roundAttempts: integer("round_attempts").notNull().default(0),
    nextAttemptAt: integer("next_attempt_at"),
    claimedUntil: integer("claimed_until"),
    claimToken: text("claim_token"),
    lastAttemptAt: integer("last_attempt_at"),
    lastStatusCode: integer("last_status_code"),
    lastError: text("last_error"),
    deliveredAt: integer("delivered_at"),
    failedAt: integer("failed_at"),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [
    uniqueIndex("events_id_uq").on(t.id),
    index("events_task_seq_idx").on(t.taskId, t.sequence),
    index("events_client_seq_idx").on(t.clientId, t.seq),
    index("events_due_idx").on(t.deliveryStatus, t.nextAttemptAt),
    index("events_client_feed_idx").on(t.clientId, t.clientSeq),
    // A key's pending events in due order: the per-key claim after a settled attempt.
    index("events_key_due_idx").on(t.clientId, t.destinationHost, t.deliveryStatus, t.nextAttemptAt),
    // A key's leased events only (a release sets claimed_until back to null): the per-key cap's
    // count walks what is in flight, not the key's backlog (event-claims.ts leasedOfKey).
    index("events_key_leased_idx")
      .on(t.clientId, t.destinationHost, t.claimedUntil)
      .where(sql`claimed_until IS NOT NULL AND delivery_status = 'pending'`),
  ],
);

export const deliveryAttempts = sqliteTable(
  "delivery_attempts",
  {
    id: text("id").primaryKey(),
    eventId: text("event_id")
      .notNull()
      .references(() => events.id, { onDelete: "cascade" }),
    taskId: text("task_id").notNull(),
    clientId: text("client_id").notNull(),
    eventType: text("event_type").notNull(),
    url: text("url").notNull(),
    attemptedAt: integer("attempted_at").notNull(),
    statusCode: integer("status_code"),
    latencyMs: integer("latency_ms"),
    /** 'succeeded' | 'failed' | 'blocked' */
    outcome: text("outcome").notNull(),
    error: text("error"),
    /** First 4 KiB of the receiver's answer, for debugging. */
    responseBody: text("response_body"),
  },
  (t) => [
    index("delivery_attempts_task_idx").on(t.taskId, t.attemptedAt),
    index("delivery_attempts_event_idx").on(t.eventId),
  ],
);

/** Per upstream account state the workers learn: concurrency and read pauses. */
export const upstreamAccounts = sqliteTable("upstream_accounts", {
  id: text("id").primaryKey(),
  /** Concurrency learned from 429 concurrent_limit; null until learned. */
  learnedMaxConcurrent: integer("learned_max_concurrent"),
  learnedAt: integer("learned_at"),
  readsPausedUntil: integer("reads_paused_until"),
  submitPausedUntil: integer("submit_paused_until"),
  updatedAt: integer("updated_at").notNull(),
});

/**
 * Every task read made against an upstream account (single or list), kept for a minute or two,
 * so the sliding-window read budget survives a restart.
 */
export const upstreamReads = sqliteTable(
  "upstream_reads",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    account: text("account").notNull(),
    at: integer("at").notNull(),
  },
  (t) => [index("upstream_reads_account_at_idx").on(t.account, t.at)],
);

/**
 * What a client made the relay do on request (test pings, redelivers, retry-nows, recovers), one
 * row each, kept for the rate limit's window: the per-client limits are counted here, so every
 * process sharing the database counts the same requests (docs/contract.md, "Limits hold across instances").
 */
export const rateLimitHits = sqliteTable(
  "rate_limit_hits",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    clientId: text("client_id").notNull(),
    /** The limited action: ping, redeliver, retry, recover. */
    action: text("action").notNull(),
    at: integer("at").notNull(),
  },
  (t) => [index("rate_limit_hits_key_at_idx").on(t.clientId, t.action, t.at)],
);

/**
 * Each client's stored bytes: the sum of its tasks' stored_bytes, counted up by intake in the
 * creation's own statement or transaction and down by retention as it prunes, so the per-client
 * bound (CLIENT_MAX_STORED_BYTES) is one row's read, not a sum over the client's tasks per creation.
 * PostgreSQL intake writes it once per group-committed batch, not once per task.
 */
export const clientStorage = sqliteTable("client_storage", {
  clientId: text("client_id")
    .primaryKey()
    .references(() => clients.id, { onDelete: "cascade" }),
  storedBytes: integer("stored_bytes").notNull(),
});

/**
 * A client's subscribed URLs (POST /openapi/v1/webhooks/endpoints): every event of the client's
 * tasks whose type is in `events` is delivered to `url` as its own destination (one events row per
 * endpoint, written with the event). Deleting one ends its pending deliveries.
 */
export const webhookEndpoints = sqliteTable(
  "webhook_endpoints",
  {
    id: text("id").primaryKey(),
    clientId: text("client_id")
      .notNull()
      .references(() => clients.id, { onDelete: "cascade" }),
    url: text("url").notNull(),
    /** `hostname:port` of url (webhooks/destination): the delivery key's host. */
    destinationHost: text("destination_host").notNull(),
    /** JSON list of the subscribed event types. */
    events: text("events").notNull(),
    description: text("description"),
    /** Headers sent with every delivery (sealed JSON, as callback_headers), or null. */
    headers: text("headers"),
    /** `webhook`, or a queue kind (`amqp`, `nats`, `sqs`: docs/destinations.md). */
    kind: text("kind").notNull().default("webhook"),
    /** A queue kind's settings (JSON; its credentials sealed inside), or null for `webhook`. */
    destination: text("destination"),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [index("webhook_endpoints_client_idx").on(t.clientId, t.createdAt)],
);

/** Learned durations (ms from submission to terminal) per type and model, for adaptive polling. */
export const durationStats = sqliteTable(
  "duration_stats",
  {
    type: text("type").notNull(),
    model: text("model").notNull(),
    /** JSON array of the most recent durations (bounded). */
    samplesJson: text("samples_json").notNull(),
    updatedAt: integer("updated_at").notNull(),
  },
  (t) => [uniqueIndex("duration_stats_type_model_uq").on(t.type, t.model)],
);

/**
 * Dashboard sign-ins (GET /dashboard). The cookie carries a random token; only its SHA-256 is
 * stored, so a copy of the database does not let anyone sign in. A session ends at `expires_at`,
 * at sign-out (`revoked_at`), or when its client is revoked (checked on every request).
 */
export const dashboardSessions = sqliteTable(
  "dashboard_sessions",
  {
    /** SHA-256 (hex) of the session token in the cookie. */
    tokenHash: text("token_hash").primaryKey(),
    clientId: text("client_id")
      .notNull()
      .references(() => clients.id, { onDelete: "cascade" }),
    /** Random per session; every dashboard POST must carry it (CSRF). */
    csrfToken: text("csrf_token").notNull(),
    createdAt: integer("created_at").notNull(),
    lastSeenAt: integer("last_seen_at").notNull(),
    expiresAt: integer("expires_at").notNull(),
    revokedAt: integer("revoked_at"),
  },
  (t) => [
    index("dashboard_sessions_client_idx").on(t.clientId),
    index("dashboard_sessions_expires_idx").on(t.expiresAt),
  ],
);

/**
 * Every change to what a client was charged or refunded, appended in the same transaction as the
 * task change that causes it. Task rows are pruned after TASK_RETENTION_DAYS; this is not, so a
 * credit limit never resets (clients.points_* hold the running totals).
 */
export const creditLedger = sqliteTable(
  "credit_ledger",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    clientId: text("client_id")
      .notNull()
      .references(() => clients.id, { onDelete: "cascade" }),
    taskId: text("task_id").notNull(),
    /** Change of points charged and refunded (either may be 0). */
    charged: integer("charged").notNull(),
    refunded: integer("refunded").notNull(),
    at: integer("at").notNull(),
    /** Counted in the client row's totals: always, on SQLite (its one writer keeps them at once). */
    rolledUp: integer("rolled_up", { mode: "boolean" }).notNull().default(true),
  },
  (t) => [
    index("credit_ledger_client_idx").on(t.clientId, t.id),
    index("credit_ledger_unrolled_idx").on(t.clientId).where(sql`NOT rolled_up`),
  ],
);

/** What a model with given price-relevant parameters costs, learned from usage.points_charged. */
export const learnedPrices = sqliteTable("learned_prices", {
  priceKey: text("price_key").primaryKey(),
  points: integer("points").notNull(),
  updatedAt: integer("updated_at").notNull(),
});

/** Written and emptied by the /readyz probe: a write that needs fresh pages, so a full disk shows. */
export const healthProbe = sqliteTable("health_probe", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  at: integer("at").notNull(),
  pad: blob("pad"),
});

/**
 * The health of one delivery key (a client's callbacks to one `host:port`), kept across restarts and
 * instances so that "answering no 2xx for WEBHOOK_FAILING_NOTICE_AFTER" can be told. A row exists
 * once the key has failed; `failing_since` is null again at its next 2xx.
 */
export const endpointHealth = sqliteTable(
  "endpoint_health",
  {
    clientId: text("client_id")
      .notNull()
      .references(() => clients.id, { onDelete: "cascade" }),
    host: text("host").notNull(),
    /** First failed attempt since the key's last 2xx; null while it answers 2xx. */
    failingSince: integer("failing_since"),
    /** Failed attempts since failing_since. */
    failedAttempts: integer("failed_attempts").notNull().default(0),
    lastError: text("last_error"),
    lastSuccessAt: integer("last_success_at"),
    /** When endpoint.failing was written for the current failing run (null: not yet). */
    noticeSentAt: integer("notice_sent_at"),
    updatedAt: integer("updated_at").notNull(),
  },
  (t) => [
    uniqueIndex("endpoint_health_key_uq").on(t.clientId, t.host),
    index("endpoint_health_failing_idx").on(t.failingSince),
  ],
);

/**
 * Operational notices to a client's notification_url: signed like webhooks, delivered by their own
 * small loop with the webhook retry schedule, never to the failing host itself.
 */
export const notices = sqliteTable(
  "notices",
  {
    id: text("id").primaryKey(),
    clientId: text("client_id")
      .notNull()
      .references(() => clients.id, { onDelete: "cascade" }),
    type: text("type").notNull(),
    payload: text("payload").notNull(),
    url: text("url").notNull(),
    deliveryStatus: text("delivery_status", { enum: DELIVERY_STATUSES }).notNull(),
    attempts: integer("attempts").notNull().default(0),
    nextAttemptAt: integer("next_attempt_at"),
    claimedUntil: integer("claimed_until"),
    claimToken: text("claim_token"),
    lastStatusCode: integer("last_status_code"),
    lastError: text("last_error"),
    deliveredAt: integer("delivered_at"),
    createdAt: integer("created_at").notNull(),
  },
  (t) => [
    index("notices_due_idx").on(t.deliveryStatus, t.nextAttemptAt),
    index("notices_client_idx").on(t.clientId, t.createdAt),
  ],
);
