// Minimal durable intake on PostgreSQL (the "PostgreSQL intake vs prototype" baseline of
// `npm run bench`): node:http, JSON parse, the same zod validation and key cache as
// bench/proto/intake-sqlite.mjs, and the relay's own `tasks` table (migrations/pg, applied by the
// relay's CLI). The server runs with fsync=on and synchronous_commit=on: a 201 goes out after its
// row's commit is flushed. Two ways to write:
//   MODE=batch     one multi-row INSERT … ON CONFLICT DO NOTHING per event-loop turn (each statement
//                  is its own transaction), up to POOL statements in flight (pg Pool, 4 by default)
//   MODE=conflict  one INSERT … ON CONFLICT DO NOTHING per request (a prepared statement), pg Pool of POOL (16)
//
//   DATABASE_URL=postgres://... [MODE=batch] [POOL=n] [PORT=0] node bench/proto/intake-pg.mjs
// prints "proto-intake-pg (<mode>) listening on http://127.0.0.1:<port>" when ready.
import { createServer } from "node:http";
import pg from "pg";
import { apiKeyCache, creationHandler, INTAKE_COLUMNS, onStop, sendJson, taskView } from "./common.mjs";

const MODE = process.env.MODE ?? "batch";
const MAX_ROWS = 500;
const pool = new pg.Pool({
  connectionString: process.env.DATABASE_URL,
  max: Number(process.env.POOL ?? (MODE === "batch" ? 4 : 16)),
});

// Every client, loaded once (a key created later is not seen: enough for a benchmark's one client).
const known = new Map(
  (await pool.query("SELECT id, upstream_account, api_key_hash FROM clients WHERE revoked_at IS NULL")).rows.map(
    (c) => [c.api_key_hash, c],
  ),
);
const clientOf = apiKeyCache((hash) => known.get(hash));

const insertSql = (n) => {
  const tuples = [];
  for (let r = 0; r < n; r++)
    tuples.push(`(${INTAKE_COLUMNS.map((_, c) => `$${r * INTAKE_COLUMNS.length + c + 1}`).join(", ")})`);
  return `INSERT INTO tasks (${INTAKE_COLUMNS.join(", ")}) VALUES ${tuples.join(", ")} ON CONFLICT (client_id, idempotency_key) DO NOTHING RETURNING id`;
};
const ONE = insertSql(1);

/** Answers each request of a written batch: 201 for an inserted row, else the original task (200) or 409. */
async function answer(items, insertedIds) {
  for (const { row, res } of items) {
    if (insertedIds.has(row.id)) {
      sendJson(res, 201, taskView(row), { location: `/openapi/v1/tasks/${row.id}`, "idempotent-replayed": "false" });
      continue;
    }
    const original = (
      await pool.query("SELECT * FROM tasks WHERE client_id = $1 AND idempotency_key = $2", [
        row.client_id,
        row.idempotency_key,
      ])
    ).rows[0];
    if (!original || original.request_hash !== row.request_hash)
      sendJson(res, 409, { error: { code: "idempotency_key_reused" } });
    else
      sendJson(
        res,
        200,
        taskView({ ...original, created_at: Number(original.created_at), updated_at: Number(original.updated_at) }),
        { "idempotent-replayed": "true" },
      );
  }
}

const fail = (items) => {
  for (const { res } of items) sendJson(res, 503, { error: { code: "storage_unavailable" } });
};

async function write(items) {
  const values = [];
  for (const { row } of items) for (const c of INTAKE_COLUMNS) values.push(row[c]);
  const sql =
    items.length === 1 ? { name: "intake-one", text: ONE, values } : { text: insertSql(items.length), values };
  const { rows } = await pool.query(sql);
  await answer(items, new Set(rows.map((r) => r.id)));
}

// MODE=batch: the rows queued during one turn go out as one statement, up to pool.options.max at a time.
const queued = [];
let scheduled = false;
let inFlight = 0;
function flush() {
  scheduled = false;
  while (queued.length > 0 && inFlight < pool.options.max) {
    const items = queued.splice(0, MAX_ROWS);
    inFlight++;
    write(items)
      .catch(() => fail(items))
      .finally(() => {
        inFlight--;
        if (queued.length > 0 && !scheduled) {
          scheduled = true;
          setImmediate(flush);
        }
      });
  }
}
function enqueue(item) {
  if (MODE !== "batch") {
    write([item]).catch(() => fail([item]));
    return;
  }
  queued.push(item);
  if (!scheduled) {
    scheduled = true;
    setImmediate(flush);
  }
}

const server = createServer(creationHandler({ clientOf, accept: enqueue }));
server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => {
  process.stdout.write(`proto-intake-pg (${MODE}) listening on http://127.0.0.1:${server.address().port}\n`);
});
onStop(async () => {
  server.close();
  await pool.end();
});
