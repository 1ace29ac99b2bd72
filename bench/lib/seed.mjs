// Writes rows straight into a migrated genrelay database with better-sqlite3 (one transaction,
// prepared statements), matching src/db/sqlite/schema.ts. Ids come from dist/ids.js and webhook bodies from
// dist/core/task-view.js, so seeded rows look like the relay's own.
import Database from "better-sqlite3";
import { createHash } from "node:crypto";
import { distImport } from "./dist.mjs";

let newId;
let flatTask;
/** Loads the relay's id and webhook-body helpers from the build in use; call once before seeding. */
export async function prepareSeeding() {
  ({ newId } = await distImport("ids.js"));
  ({ flatTask } = await distImport("core/task-view.js"));
}

const TASK_COLUMNS = [
  "id",
  "client_id",
  "type",
  "model",
  "status",
  "phase",
  "request_json",
  "callback_url",
  "callback_events",
  "metadata_json",
  "idempotency_key",
  "request_hash",
  "upstream_account",
  "upstream_idempotency_key",
  "upstream_task_id",
  "output_json",
  "points_charged",
  "points_refunded",
  "error_json",
  "event_sequence",
  "submit_attempts",
  "poll_count",
  "next_run_at",
  "claimed_until",
  "claim_token",
  "expires_at",
  "created_at",
  "updated_at",
  "submitted_at",
  "completed_at",
];
const EVENT_COLUMNS = [
  "id",
  "client_id",
  "task_id",
  "type",
  "sequence",
  "payload",
  "callback_url",
  "delivery_status",
  "attempts",
  "round_attempts",
  "next_attempt_at",
  "created_at",
];

const insertSql = (table, cols) =>
  `INSERT INTO ${table} (${cols.join(", ")}) VALUES (${cols.map((c) => `@${c}`).join(", ")})`;

export const REQUEST_BODY = {
  model: "p-image",
  mode: "generate",
  prompt: "a lighthouse at dawn, volumetric fog",
  count: 1,
};
const DEFAULT_EVENTS = JSON.stringify(["task.succeeded", "task.failed", "task.canceled"]);

function finishedTask(clientId, i, createdAt, callbackUrl) {
  const id = newId("task", createdAt);
  const upstreamId = newId("up", createdAt + 5);
  const completedAt = createdAt + 4_000;
  return {
    id,
    client_id: clientId,
    type: "image",
    model: "p-image",
    status: "succeeded",
    phase: "done",
    request_json: JSON.stringify(REQUEST_BODY),
    callback_url: callbackUrl,
    callback_events: DEFAULT_EVENTS,
    metadata_json: JSON.stringify({ order_id: String(i) }),
    idempotency_key: `seed-${String(i).padStart(9, "0")}`,
    request_hash: createHash("sha256").update(String(i)).digest("hex"),
    upstream_account: "default",
    upstream_idempotency_key: `genrelay-${id}`,
    upstream_task_id: upstreamId,
    output_json: JSON.stringify({
      images: [{ url: `https://cdn.example.com/files/${upstreamId}-0.png`, width: 1024, height: 1024 }],
    }),
    points_charged: 40,
    points_refunded: 0,
    error_json: null,
    event_sequence: 1,
    submit_attempts: 1,
    poll_count: 2,
    next_run_at: null,
    claimed_until: null,
    claim_token: null,
    expires_at: null,
    created_at: createdAt,
    updated_at: completedAt,
    submitted_at: createdAt + 5,
    completed_at: completedAt,
  };
}

function toRow(t) {
  return {
    id: t.id,
    clientId: t.client_id,
    type: t.type,
    model: t.model,
    status: t.status,
    phase: t.phase,
    requestJson: t.request_json,
    callbackUrl: t.callback_url,
    callbackEvents: t.callback_events,
    metadataJson: t.metadata_json,
    idempotencyKey: t.idempotency_key,
    requestHash: t.request_hash,
    upstreamAccount: t.upstream_account,
    upstreamIdempotencyKey: t.upstream_idempotency_key,
    upstreamTaskId: t.upstream_task_id,
    outputJson: t.output_json,
    pointsCharged: t.points_charged,
    pointsRefunded: t.points_refunded,
    errorJson: t.error_json,
    eventSequence: t.event_sequence,
    submitAttempts: t.submit_attempts,
    pollCount: t.poll_count,
    nextRunAt: t.next_run_at,
    claimedUntil: t.claimed_until,
    claimToken: t.claim_token,
    expiresAt: t.expires_at,
    createdAt: t.created_at,
    updatedAt: t.updated_at,
    submittedAt: t.submitted_at,
    completedAt: t.completed_at,
  };
}

const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz";

/** An id in the relay's format (prefix_ + 10 chars of ms time + 16 chars), cheap enough for a million rows. */
function fastId(prefix, ms, n) {
  let time = "";
  for (let i = 0, t = ms; i < 10; i++, t = Math.floor(t / 32)) time = ALPHABET[t % 32] + time;
  let tail = "";
  for (let i = 0, x = n; i < 16; i++, x = Math.floor(x / 32)) tail = ALPHABET[x % 32] + tail;
  return `${prefix}_${time}${tail}`;
}

/**
 * `count` finished (phase done, succeeded) tasks of one client, created over the last `spanDays` days
 * (inside the default 30-day retention, so the pruner leaves them alone). The tasks table's indexes
 * are dropped during the load and rebuilt after it (faster than updating them row by row), from the
 * migration's own CREATE INDEX statements. Returns seconds taken.
 */
export function seedFinishedTasks(path, clientId, count, { spanDays = 20 } = {}) {
  const started = performance.now();
  const db = new Database(path);
  // No journal while loading (a failed seed is simply redone); back to WAL, as the relay runs it, at the end.
  db.pragma("journal_mode = OFF");
  db.pragma("synchronous = OFF");
  db.pragma("cache_size = -262144");
  const indexes = db
    .prepare("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'tasks' AND sql IS NOT NULL")
    .all();
  for (const { name } of indexes) db.exec(`DROP INDEX "${name}"`);
  const insert = db.prepare(insertSql("tasks", TASK_COLUMNS));
  const start = Date.now() - spanDays * 86_400_000;
  const step = (spanDays * 86_400_000) / Math.max(1, count);
  const requestJson = JSON.stringify(REQUEST_BODY);
  const row = { ...finishedTask(clientId, 0, start, null) };
  const batch = 100_000;
  for (let from = 0; from < count; from += batch) {
    db.transaction(() => {
      for (let i = from; i < Math.min(count, from + batch); i++) {
        const createdAt = Math.floor(start + i * step);
        const id = fastId("task", createdAt, i);
        const upstreamId = fastId("up", createdAt + 5, i);
        row.id = id;
        row.request_json = requestJson;
        row.metadata_json = `{"order_id":"${i}"}`;
        row.idempotency_key = `seed-${String(i).padStart(9, "0")}`;
        row.request_hash = String(i).padStart(64, "0");
        row.upstream_idempotency_key = `genrelay-${id}`;
        row.upstream_task_id = upstreamId;
        row.output_json = `{"images":[{"url":"https://cdn.example.com/files/${upstreamId}-0.png","width":1024,"height":1024}]}`;
        row.created_at = createdAt;
        row.submitted_at = createdAt + 5;
        row.updated_at = createdAt + 4_000;
        row.completed_at = createdAt + 4_000;
        insert.run(row);
      }
    })();
  }
  for (const { sql } of indexes) db.exec(sql);
  db.pragma("journal_mode = WAL");
  db.close();
  return (performance.now() - started) / 1000;
}

/**
 * `count` tasks waiting in the relay (accepted, never submitted), as intake leaves them: for the
 * memory benchmark, which needs many tasks faster than HTTP intake can create them.
 */
export function seedWaitingTasks(path, clientId, count) {
  const db = new Database(path);
  db.pragma("journal_mode = WAL");
  const insert = db.prepare(insertSql("tasks", TASK_COLUMNS));
  const now = Date.now();
  db.transaction(() => {
    for (let i = 0; i < count; i++) {
      const t = finishedTask(clientId, i, now - 1_000, "https://hooks.example.com/genrelay");
      Object.assign(t, {
        id: newId("task", now - 1_000),
        status: "queued",
        phase: "waiting",
        idempotency_key: `wait-${String(i).padStart(9, "0")}`,
        upstream_task_id: null,
        output_json: null,
        points_charged: null,
        points_refunded: null,
        event_sequence: 0,
        submit_attempts: 0,
        poll_count: 0,
        next_run_at: now - 1_000,
        updated_at: now - 1_000,
        submitted_at: null,
        completed_at: null,
      });
      t.upstream_idempotency_key = `genrelay-${t.id}`;
      insert.run(t);
    }
  })();
  db.close();
}

/**
 * `count` finished tasks, each with one pending task.succeeded event due now, addressed to
 * callbackUrl: the outbox as the poller leaves it, for the dispatcher to drain.
 * Returns the body size of one event (bytes) and a sample body.
 */
/** `count` finished tasks, each with a due task.succeeded event for `callbackUrl` (rows by column name). */
export function pendingEventRows(clientId, count, callbackUrl, destinationHost) {
  const now = Date.now();
  const rows = [];
  for (let i = 0; i < count; i++) {
    const t = finishedTask(clientId, i, now - 5_000, callbackUrl);
    t.idempotency_key = `evt-${String(i).padStart(9, "0")}`;
    t.completed_at = now;
    t.updated_at = now;
    const body = JSON.stringify({
      type: "task.succeeded",
      timestamp: new Date(now).toISOString(),
      data: { ...flatTask(toRow(t)), sequence: 1, previous_status: "processing" },
    });
    const event = {
      id: newId("evt", now),
      client_id: clientId,
      task_id: t.id,
      type: "task.succeeded",
      sequence: 1,
      payload: body,
      callback_url: callbackUrl,
      delivery_status: "pending",
      attempts: 0,
      round_attempts: 0,
      next_attempt_at: now - 1,
      created_at: now,
      ...(destinationHost ? { client_seq: i + 1, destination_host: destinationHost } : {}),
    };
    rows.push({ task: t, event });
  }
  return { rows, sample: rows[0]?.event.payload ?? "", TASK_COLUMNS, EVENT_COLUMNS };
}

export function seedPendingEvents(path, clientId, count, callbackUrl) {
  const db = new Database(path);
  db.pragma("journal_mode = WAL");
  const insertTask = db.prepare(insertSql("tasks", TASK_COLUMNS));
  const insertEvent = db.prepare(insertSql("events", EVENT_COLUMNS));
  const { rows, sample } = pendingEventRows(clientId, count, callbackUrl);
  db.transaction(() => {
    for (const { task, event } of rows) {
      insertTask.run(task);
      insertEvent.run(event);
    }
  })();
  db.close();
  return { bytes: Buffer.byteLength(sample), sample };
}

/** Deletes the tasks a benchmark round created through the API (keys start with the prefix), with their events. */
export function deleteBenchTasks(path, clientId, keyPrefix) {
  const db = new Database(path);
  db.pragma("journal_mode = WAL");
  db.pragma("foreign_keys = ON");
  const hi = keyPrefix.slice(0, -1) + String.fromCharCode(keyPrefix.charCodeAt(keyPrefix.length - 1) + 1);
  const n = db
    .prepare("DELETE FROM tasks WHERE client_id = ? AND idempotency_key >= ? AND idempotency_key < ?")
    .run(clientId, keyPrefix, hi).changes;
  db.pragma("wal_checkpoint(TRUNCATE)");
  db.close();
  return n;
}

/** Tasks with idempotency keys starting with prefix (the durability check: every 201 is a row). */
export function countBenchTasks(path, clientId, keyPrefix) {
  const db = new Database(path, { readonly: true, fileMustExist: true });
  const hi = keyPrefix.slice(0, -1) + String.fromCharCode(keyPrefix.charCodeAt(keyPrefix.length - 1) + 1);
  const n = db
    .prepare("SELECT count(*) AS n FROM tasks WHERE client_id = ? AND idempotency_key >= ? AND idempotency_key < ?")
    .get(clientId, keyPrefix, hi).n;
  db.close();
  return n;
}

export function phaseCounts(path) {
  const db = new Database(path, { readonly: true, fileMustExist: true });
  try {
    const rows = db.prepare("SELECT phase, count(*) AS n FROM tasks GROUP BY phase").all();
    return Object.fromEntries(rows.map((r) => [r.phase, r.n]));
  } finally {
    db.close();
  }
}
