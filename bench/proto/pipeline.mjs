// Minimal end-to-end path on SQLite (the prototype beside the relay's CPU-ms per task end to end in
// `npm run bench`): bench/proto/intake-sqlite.mjs's intake, then three claim -> act -> record loops
// on the relay's own tables, each claiming rows in batches under a lease with one UPDATE … RETURNING
// and recording results in batched transactions (WAL, synchronous=FULL):
//   submit   waiting tasks -> POST to the upstream (undici Pool) -> phase submitted, upstream_task_id
//   poll     submitted tasks due -> GET /openapi/v1/tasks/{id} -> when terminal: the task done, its
//            event written (client_seq from the clients row) in the same transaction
//   deliver  bench/proto/delivery.mjs on the events written
// Not done (the relay does them): list reads and the read budget, credits, the upstream's
// concurrency, retries of failed submissions, output copies. A first read follows the submission
// at once (the relay waits 2 s for an image): neither changes the CPU a task costs much.
//
//   DATABASE_PATH=... UPSTREAM_BASE_URL=... UPSTREAM_API_KEY=... [PORT=0] node bench/proto/pipeline.mjs
// prints "proto-pipeline listening on http://127.0.0.1:<port>" when ready.
import { createServer } from "node:http";
import { Pool } from "undici";
import { sqliteDelivery } from "./delivery.mjs";
import { sqliteIntake } from "./intake-sqlite.mjs";
import { alarm, newId, onStop, openSqlite, perTurn } from "./common.mjs";

const TERMINAL = new Set(["succeeded", "failed", "canceled"]);
const LEASE_MS = 60_000;
const db = openSqlite(process.env.DATABASE_PATH);
const upstream = new Pool(process.env.UPSTREAM_BASE_URL, { connections: 16, keepAliveTimeout: 60_000 });
const auth = `Bearer ${process.env.UPSTREAM_API_KEY}`;
const token = newId("own");

/**
 * Claims up to `batch` rows, runs `act` on each (at most `concurrency` at a time) and hands the
 * settled results to `apply` in batches (one transaction each); looks again every 250 ms when dry.
 */
function loop({ claim, act, apply, concurrency = 16, batch = 64 }) {
  const queue = [];
  let inFlight = 0;
  let dry = false;
  const sleep = alarm(() => {
    dry = false;
    pump();
  });
  const record = perTurn(apply, { delayMs: 10, max: batch });
  function pump() {
    if (queue.length < batch / 2 && !dry) {
      const rows = claim(batch);
      queue.push(...rows);
      dry = rows.length < batch;
    }
    while (queue.length > 0 && inFlight < concurrency) {
      const row = queue.shift();
      inFlight++;
      act(row)
        .then(
          (result) => ({ row, ...result }),
          (err) => ({ row, error: String(err?.message ?? err) }),
        )
        .then((result) => {
          inFlight--;
          record(result);
          pump();
        });
    }
    if (dry && queue.length === 0) sleep.later(250);
  }
  return { wake: () => sleep.now(), stop: () => sleep.cancel() };
}

async function upstreamJson(opts) {
  const res = await upstream.request({
    ...opts,
    headers: { authorization: auth, "content-type": "application/json", ...opts.headers },
    headersTimeout: 30_000,
    bodyTimeout: 30_000,
  });
  const body = await res.body.json();
  return { statusCode: res.statusCode, body };
}

// --- submit -------------------------------------------------------------------------------------
const claimWaiting = db.prepare(
  `UPDATE tasks SET claimed_until = @until, claim_token = @token
    WHERE id IN (SELECT id FROM tasks WHERE phase = 'waiting' AND next_run_at <= @now AND (claimed_until IS NULL OR claimed_until < @now)
                 ORDER BY next_run_at LIMIT @limit)
    RETURNING id, type, request_json, upstream_idempotency_key`,
);
const submitted = db.prepare(
  `UPDATE tasks SET phase = 'submitted', status = @status, upstream_task_id = @upstream, submitted_at = @now, submit_attempts = submit_attempts + 1,
          next_run_at = @now, updated_at = @now, claimed_until = NULL, claim_token = NULL
    WHERE id = @id AND claim_token = @token`,
);
const submitLater = db.prepare(
  "UPDATE tasks SET next_run_at = @next, claimed_until = NULL, claim_token = NULL WHERE id = @id AND claim_token = @token",
);
const recordSubmissions = db.transaction((results) => {
  const now = Date.now();
  for (const r of results) {
    const upstreamId = r.statusCode < 300 ? r.body?.data?.id : undefined;
    if (upstreamId)
      submitted.run({
        id: r.row.id,
        token,
        now,
        upstream: upstreamId,
        status: r.body.data.status === "processing" ? "processing" : "queued",
      });
    else submitLater.run({ id: r.row.id, token, next: now + 5_000 });
  }
});

// --- poll and complete ----------------------------------------------------------------------------
const claimDue = db.prepare(
  `UPDATE tasks SET claimed_until = @until, claim_token = @token
    WHERE id IN (SELECT id FROM tasks WHERE phase = 'submitted' AND next_run_at <= @now AND (claimed_until IS NULL OR claimed_until < @now)
                 ORDER BY next_run_at LIMIT @limit)
    RETURNING id, client_id, type, model, created_at, metadata_json, callback_url, callback_events, upstream_task_id, event_sequence`,
);
const pollLater = db.prepare(
  "UPDATE tasks SET poll_count = poll_count + 1, next_run_at = @next, claimed_until = NULL, claim_token = NULL WHERE id = @id AND claim_token = @token",
);
const finished = db.prepare(
  `UPDATE tasks SET phase = 'done', status = @status, output_json = @output, error_json = @error, points_charged = @charged, poll_count = poll_count + 1,
          event_sequence = event_sequence + 1, completed_at = @now, updated_at = @now, next_run_at = NULL, claimed_until = NULL, claim_token = NULL
    WHERE id = @id AND claim_token = @token`,
);
const nextClientSeq = db.prepare("UPDATE clients SET event_seq = event_seq + 1 WHERE id = ? RETURNING event_seq");
const insertEvent = db.prepare(
  `INSERT INTO events (id, client_id, task_id, type, sequence, payload, callback_url, delivery_status, next_attempt_at, created_at, client_seq, destination_host)
   VALUES (@id, @client_id, @task_id, @type, @sequence, @payload, @callback_url, 'pending', @now, @now, @client_seq, @host)`,
);
const iso = (ms) => new Date(ms).toISOString();
let eventsWritten = 0;
const recordPolls = db.transaction((results) => {
  const now = Date.now();
  for (const { row, body, error } of results) {
    const status = body?.data?.status;
    if (error || !TERMINAL.has(status)) {
      pollLater.run({ id: row.id, token, next: now + 1_000 });
      continue;
    }
    const output = body.output ?? null;
    const taskError = body.data.error ?? null;
    const charged = body.usage?.points_charged ?? null;
    finished.run({
      id: row.id,
      token,
      now,
      status,
      output: output && JSON.stringify(output),
      error: taskError && JSON.stringify(taskError),
      charged,
    });
    const type = `task.${status}`;
    if (!row.callback_url || !JSON.parse(row.callback_events).includes(type)) continue;
    const sequence = row.event_sequence + 1;
    const payload = JSON.stringify({
      type,
      timestamp: iso(now),
      data: {
        id: row.id,
        type: row.type,
        status,
        model: row.model,
        created_at: iso(row.created_at),
        updated_at: iso(now),
        completed_at: iso(now),
        upstream_task_id: row.upstream_task_id,
        error: taskError,
        metadata: row.metadata_json ? JSON.parse(row.metadata_json) : null,
        callback: { url: row.callback_url, events: JSON.parse(row.callback_events) },
        output,
        usage: { points_charged: charged, points_refunded: null },
        sequence,
      },
    });
    const url = new URL(row.callback_url);
    insertEvent.run({
      id: newId("evt", now),
      client_id: row.client_id,
      task_id: row.id,
      type,
      sequence,
      payload,
      callback_url: row.callback_url,
      now,
      client_seq: nextClientSeq.get(row.client_id).event_seq,
      host: url.host,
    });
    eventsWritten++;
  }
});

const claimer = (stmt) => (limit) => {
  const now = Date.now();
  return stmt.all({ now, until: now + LEASE_MS, token, limit });
};

const delivery = sqliteDelivery(db, { perHost: 8 });
const poller = loop({
  claim: claimer(claimDue),
  act: (row) => upstreamJson({ method: "GET", path: `/openapi/v1/tasks/${encodeURIComponent(row.upstream_task_id)}` }),
  apply: (results) => {
    const before = eventsWritten;
    recordPolls(results);
    if (eventsWritten > before) delivery.wake();
  },
});
const submitter = loop({
  claim: claimer(claimWaiting),
  act: (row) =>
    upstreamJson({
      method: "POST",
      path: `/openapi/v1/${row.type}s/generations`,
      headers: { "idempotency-key": row.upstream_idempotency_key },
      body: row.request_json,
    }),
  apply: (results) => {
    recordSubmissions(results);
    poller.wake();
  },
});

const server = createServer(sqliteIntake(db, { allowHttpCallbacks: true, onCommitted: () => submitter.wake() }));
server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => {
  process.stdout.write(`proto-pipeline listening on http://127.0.0.1:${server.address().port}\n`);
  submitter.wake();
  poller.wake();
  delivery.start();
});
onStop(async () => {
  server.close();
  submitter.stop();
  poller.stop();
  await delivery.stop();
  await upstream.close();
  db.close();
});
