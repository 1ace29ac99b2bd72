import { sql } from "drizzle-orm";
import {
  bigint,
  bigserial,
  boolean,
  customType,
  index,
  pgTable,
  primaryKey,
  text,
  unique,
  uniqueIndex,
} from "drizzle-orm/pg-core";
import { TASK_PHASES, TASK_STATUSES } from "../../statuses.js";
import { DELIVERY_STATUSES } from "../../statuses.js";

/**
 * The PostgreSQL schema: the same tables, columns and row types as the SQLite schema (../sqlite/schema.ts,
 * where every column is documented), held to it by test/unit/schema-parity.test.ts. Integers are
 * `bigint` in number mode (epoch milliseconds overflow int4); the pool parses int8 as a number.
 * Differences, on purpose:
 * - `events.id` is a UNIQUE CONSTRAINT, not only a unique index: delivery_attempts.event_id
 *   references it, and drizzle-kit emits foreign keys before indexes;
 * - `account_leaders` exists only here: account leadership among several processes (SQLite has one).
 * Migrations: `npm run db:generate:pg` writes migrations/pg/ (drizzle.pg.config.ts).
 */
const ms = (name: string) => bigint(name, { mode: "number" });

/** `bytea`, typed `unknown` like SQLite's `blob()`, so health_probe's rows match (the probe never reads it). */
const bytea = customType<{ data: unknown; driverData: Buffer }>({ dataType: () => "bytea" });

export const clients = pgTable(
  "clients",
  {
    id: text("id").primaryKey(),
    name: text("name").notNull(),
    apiKeyHash: text("api_key_hash").notNull(),
    apiKeyPrefix: text("api_key_prefix").notNull(),
    webhookSecret: text("webhook_secret").notNull(),
    previousWebhookSecret: text("previous_webhook_secret"),
    previousSecretExpiresAt: ms("previous_secret_expires_at"),
    upstreamKeyEncrypted: text("upstream_key_encrypted"),
    upstreamAccount: text("upstream_account").notNull().default("default"),
    maxWaiting: ms("max_waiting"),
    maxRunning: ms("max_running"),
    creditLimit: ms("credit_limit"),
    pointsCharged: ms("points_charged").notNull().default(0),
    pointsRefunded: ms("points_refunded").notNull().default(0),
    pointsReserved: ms("points_reserved").notNull().default(0),
    eventSeq: ms("event_seq").notNull().default(0),
    lastAdmittedAt: ms("last_admitted_at").notNull().default(0),
    createdAt: ms("created_at").notNull(),
    revokedAt: ms("revoked_at"),
    notificationUrl: text("notification_url"),
    callbackHeaders: text("callback_headers"),
    signatureScheme: text("signature_scheme", { enum: ["hmac", "ed25519"] })
      .notNull()
      .default("hmac"),
    signingKey: text("signing_key"),
    previousSigningKey: text("previous_signing_key"),
    previousSigningKeyExpiresAt: ms("previous_signing_key_expires_at"),
    previousSchemeExpiresAt: ms("previous_scheme_expires_at"),
    storageConfig: text("storage_config"),
  },
  (t) => [uniqueIndex("clients_api_key_hash_uq").on(t.apiKeyHash)],
);

export const tasks = pgTable(
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
    requestJson: text("request_json").notNull(),
    callbackUrl: text("callback_url"),
    callbackEvents: text("callback_events").notNull(),
    metadataJson: text("metadata_json"),
    idempotencyKey: text("idempotency_key").notNull(),
    requestHash: text("request_hash").notNull(),
    upstreamAccount: text("upstream_account").notNull(),
    upstreamIdempotencyKey: text("upstream_idempotency_key").notNull(),
    upstreamTaskId: text("upstream_task_id"),
    outputJson: text("output_json"),
    pointsCharged: ms("points_charged"),
    pointsRefunded: ms("points_refunded"),
    errorJson: text("error_json"),
    pointsReserved: ms("points_reserved").notNull().default(0),
    priceKey: text("price_key").notNull().default(""),
    conflictSince: ms("conflict_since"),
    eventSequence: ms("event_sequence").notNull().default(0),
    submitAttempts: ms("submit_attempts").notNull().default(0),
    pollCount: ms("poll_count").notNull().default(0),
    nextRunAt: ms("next_run_at"),
    claimedUntil: ms("claimed_until"),
    claimToken: text("claim_token"),
    expiresAt: ms("expires_at"),
    createdAt: ms("created_at").notNull(),
    updatedAt: ms("updated_at").notNull(),
    submittedAt: ms("submitted_at"),
    completedAt: ms("completed_at"),
    callbackHeaders: text("callback_headers"),
    filesJson: text("files_json"),
    storedBytes: ms("stored_bytes").notNull().default(0),
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
    uniqueIndex("tasks_upstream_task_uq").on(t.upstreamAccount, t.upstreamTaskId),
    index("tasks_done_completed_idx").on(t.phase, t.completedAt),
    index("tasks_phase_lease_idx").on(t.phase, t.claimedUntil),
    index("tasks_client_phase_idx").on(t.clientId, t.phase),
    // A client's reservations summed on read (db/pg/credit-books.ts): only the tasks holding one.
    index("tasks_client_reserved_idx").on(t.clientId, t.pointsReserved).where(sql`points_reserved <> 0`),
    // The orphan sweep asks whether any task holds a ref.
    index("tasks_output_ref_idx").on(t.outputRef).where(sql`output_ref IS NOT NULL`),
  ],
);

/**
 * A long output in pieces (core/stored-output.ts), written before the transition that puts its ref
 * on the task, each piece in a short write of its own: no step holds the event loop for the whole
 * text. A ref no task holds is a writer killed before its transition, swept after an hour.
 */
export const taskOutputPieces = pgTable(
  "task_output_pieces",
  {
    ref: text("ref").notNull(),
    seq: ms("seq").notNull(),
    /** The last piece is marked, so a reader tells a whole output from one cut short. */
    last: boolean("last").notNull(),
    text: text("text").notNull(),
    /** The piece's UTF-8 bytes: what it adds to its client's stored bytes (a trigger sums them, never reading the text). */
    bytes: ms("bytes").notNull(),
    createdAt: ms("created_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.ref, t.seq] }), index("task_output_pieces_created_idx").on(t.createdAt)],
);

export const events = pgTable(
  "events",
  {
    seq: bigserial("seq", { mode: "number" }).primaryKey(),
    id: text("id").notNull(),
    clientId: text("client_id")
      .notNull()
      .references(() => clients.id),
    clientSeq: ms("client_seq").notNull().default(0),
    taskId: text("task_id")
      .notNull()
      .references(() => tasks.id, { onDelete: "cascade" }),
    type: text("type").notNull(),
    sequence: ms("sequence").notNull(),
    payload: text("payload").notNull(),
    callbackUrl: text("callback_url"),
    destinationHost: text("destination_host").notNull().default(""),
    callbackHeaders: text("callback_headers"),
    /** The task's trace context, copied when the event is written: every attempt sends it. */
    traceparent: text("traceparent"),
    tracestate: text("tracestate"),
    deliveryStatus: text("delivery_status", { enum: DELIVERY_STATUSES }).notNull(),
    webhookId: text("webhook_id"),
    endpointId: text("endpoint_id"),
    attempts: ms("attempts").notNull().default(0),
    roundAttempts: ms("round_attempts").notNull().default(0),
    nextAttemptAt: ms("next_attempt_at"),
    claimedUntil: ms("claimed_until"),
    claimToken: text("claim_token"),
    lastAttemptAt: ms("last_attempt_at"),
    lastStatusCode: ms("last_status_code"),
    lastError: text("last_error"),
    deliveredAt: ms("delivered_at"),
    failedAt: ms("failed_at"),
    createdAt: ms("created_at").notNull(),
  },
  (t) => [
    unique("events_id_uq").on(t.id),
    index("events_task_seq_idx").on(t.taskId, t.sequence),
    index("events_client_seq_idx").on(t.clientId, t.seq),
    index("events_due_idx").on(t.deliveryStatus, t.nextAttemptAt),
    index("events_client_feed_idx").on(t.clientId, t.clientSeq),
    // A key's pending events in due order: the key's claim window (event-claims.ts).
    index("events_key_due_idx").on(t.clientId, t.destinationHost, t.deliveryStatus, t.nextAttemptAt),
    // A key's leased events only (a release sets claimed_until back to null): the per-key cap's
    // count walks what is in flight, not the key's backlog (event-claims.ts).
    index("events_key_leased_idx")
      .on(t.clientId, t.destinationHost, t.claimedUntil)
      .where(sql`claimed_until IS NOT NULL AND delivery_status = 'pending'`),
  ],
);

/**
 * One row per delivery key (client, destination host), created by the first claim of the key and
 * holding nothing else: the lock that serialises claims of the same key across instances (a
 * claim takes it FOR UPDATE for one statement, then counts the key's leases; event-claims.ts).
 * Claims of different keys never wait for each other.
 */
export const deliveryKeys = pgTable(
  "delivery_keys",
  {
    clientId: text("client_id").notNull(),
    destinationHost: text("destination_host").notNull(),
  },
  (t) => [primaryKey({ columns: [t.clientId, t.destinationHost] })],
);

export const deliveryAttempts = pgTable(
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
    attemptedAt: ms("attempted_at").notNull(),
    statusCode: ms("status_code"),
    latencyMs: ms("latency_ms"),
    outcome: text("outcome").notNull(),
    error: text("error"),
    responseBody: text("response_body"),
  },
  (t) => [
    index("delivery_attempts_task_idx").on(t.taskId, t.attemptedAt),
    index("delivery_attempts_event_idx").on(t.eventId),
  ],
);

export const upstreamAccounts = pgTable("upstream_accounts", {
  id: text("id").primaryKey(),
  learnedMaxConcurrent: ms("learned_max_concurrent"),
  learnedAt: ms("learned_at"),
  readsPausedUntil: ms("reads_paused_until"),
  submitPausedUntil: ms("submit_paused_until"),
  updatedAt: ms("updated_at").notNull(),
});

export const upstreamReads = pgTable(
  "upstream_reads",
  {
    id: bigserial("id", { mode: "number" }).primaryKey(),
    account: text("account").notNull(),
    at: ms("at").notNull(),
  },
  (t) => [index("upstream_reads_account_at_idx").on(t.account, t.at)],
);

export const rateLimitHits = pgTable(
  "rate_limit_hits",
  {
    id: bigserial("id", { mode: "number" }).primaryKey(),
    clientId: text("client_id").notNull(),
    action: text("action").notNull(),
    at: ms("at").notNull(),
  },
  (t) => [index("rate_limit_hits_key_at_idx").on(t.clientId, t.action, t.at)],
);

export const webhookEndpoints = pgTable(
  "webhook_endpoints",
  {
    id: text("id").primaryKey(),
    clientId: text("client_id")
      .notNull()
      .references(() => clients.id, { onDelete: "cascade" }),
    url: text("url").notNull(),
    destinationHost: text("destination_host").notNull(),
    events: text("events").notNull(),
    description: text("description"),
    headers: text("headers"),
    kind: text("kind").notNull().default("webhook"),
    destination: text("destination"),
    createdAt: ms("created_at").notNull(),
  },
  (t) => [index("webhook_endpoints_client_idx").on(t.clientId, t.createdAt)],
);

/**
 * PostgreSQL only (several processes): who leads each upstream account, until when. The leader
 * renews its row; once `expires_at` (the database's clock, epoch ms) has passed, or the backend
 * `holder_pid` is gone, another process takes the row and `fence` goes up by one. Claims made as
 * leader carry the fence and take nothing once it has moved on (src/db/pg/leadership.ts,
 * docs/decisions/0010-leadership-and-fencing.md). Rows are never deleted: the fence only grows.
 */
export const accountLeaders = pgTable("account_leaders", {
  account: text("account").primaryKey(),
  /** The leading process's lease owner id (its claim tokens are `<holder>:<n>`). */
  holder: text("holder").notNull(),
  fence: ms("fence").notNull(),
  expiresAt: ms("expires_at").notNull(),
  /** pg_backend_pid() of the leader's dedicated connection: gone means the process is, so no need to wait for expires_at. */
  holderPid: ms("holder_pid").notNull(),
  takenAt: ms("taken_at").notNull(),
});

export const clientStorage = pgTable("client_storage", {
  clientId: text("client_id")
    .primaryKey()
    .references(() => clients.id, { onDelete: "cascade" }),
  storedBytes: ms("stored_bytes").notNull(),
});

/**
 * What was written for a client after its task's creation (event rows per destination, attempts'
 * stored answers, outputs and files) and what pruning took off, appended by triggers
 * (migrations/pg/0011_stored_bytes_triggers.sql) so that no writer waits on another: a client's
 * stored bytes are its client_storage row plus its rows here, which stored-bytes-log.ts folds into
 * client_storage in the background.
 */
export const clientStorageLog = pgTable(
  "client_storage_log",
  {
    id: bigserial("id", { mode: "number" }).primaryKey(),
    clientId: text("client_id").notNull(),
    bytes: ms("bytes").notNull(),
  },
  (t) => [index("client_storage_log_client_idx").on(t.clientId, t.bytes)],
);

/**
 * Room under a client's stored-bytes bound reserved by one instance (`holder`, its application name)
 * ahead of its creations (stored-bytes-grants.ts): the instance spends it in memory and settles what
 * it spent onto the row in the background, creations only share-lock it, so creations never wait on
 * one another; the bound is decided against stored bytes plus every grant, under the client's
 * client_storage row lock, only when a grant runs out.
 */
export const clientStorageGrants = pgTable(
  "client_storage_grants",
  {
    clientId: text("client_id")
      .notNull()
      .references(() => clients.id, { onDelete: "cascade" }),
    holder: text("holder").notNull(),
    allowance: ms("allowance").notNull(),
  },
  (t) => [primaryKey({ columns: [t.clientId, t.holder] })],
);

export const durationStats = pgTable(
  "duration_stats",
  {
    type: text("type").notNull(),
    model: text("model").notNull(),
    samplesJson: text("samples_json").notNull(),
    updatedAt: ms("updated_at").notNull(),
  },
  (t) => [uniqueIndex("duration_stats_type_model_uq").on(t.type, t.model)],
);

export const dashboardSessions = pgTable(
  "dashboard_sessions",
  {
    tokenHash: text("token_hash").primaryKey(),
    clientId: text("client_id")
      .notNull()
      .references(() => clients.id, { onDelete: "cascade" }),
    csrfToken: text("csrf_token").notNull(),
    createdAt: ms("created_at").notNull(),
    lastSeenAt: ms("last_seen_at").notNull(),
    expiresAt: ms("expires_at").notNull(),
    revokedAt: ms("revoked_at"),
  },
  (t) => [
    index("dashboard_sessions_client_idx").on(t.clientId),
    index("dashboard_sessions_expires_idx").on(t.expiresAt),
  ],
);

export const creditLedger = pgTable(
  "credit_ledger",
  {
    id: bigserial("id", { mode: "number" }).primaryKey(),
    clientId: text("client_id")
      .notNull()
      .references(() => clients.id, { onDelete: "cascade" }),
    taskId: text("task_id").notNull(),
    charged: ms("charged").notNull(),
    refunded: ms("refunded").notNull(),
    at: ms("at").notNull(),
    /**
     * Counted in the client row's totals. PostgreSQL writes a charge as a row not yet rolled up and
     * folds them into the totals later (db/pg/credit-books.ts); a row written otherwise is counted.
     */
    rolledUp: boolean("rolled_up").notNull().default(true),
  },
  (t) => [
    index("credit_ledger_client_idx").on(t.clientId, t.id),
    index("credit_ledger_unrolled_idx").on(t.clientId).where(sql`NOT rolled_up`),
  ],
);

export const learnedPrices = pgTable("learned_prices", {
  priceKey: text("price_key").primaryKey(),
  points: ms("points").notNull(),
  updatedAt: ms("updated_at").notNull(),
});

export const healthProbe = pgTable("health_probe", {
  id: bigserial("id", { mode: "number" }).primaryKey(),
  at: ms("at").notNull(),
  pad: bytea("pad"),
});

export const endpointHealth = pgTable(
  "endpoint_health",
  {
    clientId: text("client_id")
      .notNull()
      .references(() => clients.id, { onDelete: "cascade" }),
    host: text("host").notNull(),
    failingSince: ms("failing_since"),
    failedAttempts: ms("failed_attempts").notNull().default(0),
    lastError: text("last_error"),
    lastSuccessAt: ms("last_success_at"),
    noticeSentAt: ms("notice_sent_at"),
    updatedAt: ms("updated_at").notNull(),
  },
  (t) => [
    uniqueIndex("endpoint_health_key_uq").on(t.clientId, t.host),
    index("endpoint_health_failing_idx").on(t.failingSince),
  ],
);

export const notices = pgTable(
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
    attempts: ms("attempts").notNull().default(0),
    nextAttemptAt: ms("next_attempt_at"),
    claimedUntil: ms("claimed_until"),
    claimToken: text("claim_token"),
    lastStatusCode: ms("last_status_code"),
    lastError: text("last_error"),
    deliveredAt: ms("delivered_at"),
    createdAt: ms("created_at").notNull(),
  },
  (t) => [
    index("notices_due_idx").on(t.deliveryStatus, t.nextAttemptAt),
    index("notices_client_idx").on(t.clientId, t.createdAt),
  ],
);
