// Minimal durable intake on SQLite (the "intake vs prototype" baseline of `npm run bench`): the work
// the relay's POST /openapi/v1/images/generations does, nothing more. node:http; JSON parse; the
// same fields validated with zod; Bearer key -> SHA-256 -> client from an in-memory cache; one
// prepared INSERT into the relay's own `tasks` table (the database is migrated by the relay's CLI,
// so every index is there); the inserts of one event-loop turn in one transaction (WAL,
// synchronous=FULL: the 201 goes out after the commit is on disk); 201 with the task's JSON.
//
//   DATABASE_PATH=... [PORT=0] [ALLOW_HTTP_CALLBACKS=true] node bench/proto/intake-sqlite.mjs
// prints "proto-intake listening on http://127.0.0.1:<port>" when ready.
import { createServer } from "node:http";
import { fileURLToPath } from "node:url";
import {
  apiKeyCache,
  creationHandler,
  INTAKE_COLUMNS,
  onStop,
  openSqlite,
  perTurn,
  sendJson,
  taskView,
} from "./common.mjs";

/**
 * The intake handler on an open database. `onCommitted(rows)` runs after each group commit (the
 * end-to-end prototype wakes its submitter there).
 */
export function sqliteIntake(db, { allowHttpCallbacks = false, onCommitted = () => {} } = {}) {
  const clientOf = apiKeyCache((hash) =>
    db.prepare("SELECT id, upstream_account FROM clients WHERE api_key_hash = ? AND revoked_at IS NULL").get(hash),
  );
  const insert = db.prepare(
    `INSERT INTO tasks (${INTAKE_COLUMNS.join(", ")}) VALUES (${INTAKE_COLUMNS.map((c) => `@${c}`).join(", ")}) ON CONFLICT (client_id, idempotency_key) DO NOTHING`,
  );
  const existing = db.prepare("SELECT * FROM tasks WHERE client_id = ? AND idempotency_key = ?");
  const insertAll = db.transaction((items) => {
    for (const item of items) {
      try {
        item.inserted = insert.run(item.row).changes === 1;
      } catch (err) {
        item.failed = err;
      }
    }
  });
  const commit = perTurn((items) => {
    try {
      insertAll(items);
    } catch (err) {
      for (const item of items) item.failed = err;
    }
    const committed = [];
    for (const { row, res, inserted, failed } of items) {
      if (failed) {
        sendJson(res, 503, { error: { code: "storage_unavailable" } });
      } else if (inserted) {
        committed.push(row);
        sendJson(res, 201, taskView(row), { location: `/openapi/v1/tasks/${row.id}`, "idempotent-replayed": "false" });
      } else {
        // The key was used before: the original task (200), or 409 for a different body.
        const original = existing.get(row.client_id, row.idempotency_key);
        if (original.request_hash !== row.request_hash)
          sendJson(res, 409, { error: { code: "idempotency_key_reused" } });
        else
          sendJson(res, 200, taskView(original), {
            location: `/openapi/v1/tasks/${original.id}`,
            "idempotent-replayed": "true",
          });
      }
    }
    if (committed.length > 0) onCommitted(committed);
  });

  return creationHandler({ clientOf, accept: commit, allowHttpCallbacks });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const db = openSqlite(process.env.DATABASE_PATH);
  const server = createServer(sqliteIntake(db, { allowHttpCallbacks: process.env.ALLOW_HTTP_CALLBACKS === "true" }));
  server.keepAliveTimeout = 60_000;
  server.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => {
    process.stdout.write(`proto-intake listening on http://127.0.0.1:${server.address().port}\n`);
  });
  onStop(() => {
    server.close();
    db.close();
  });
}
