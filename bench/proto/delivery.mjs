// Minimal delivery of a pre-written outbox on SQLite (the "delivery vs prototype" baseline of
// `npm run bench`): claim due rows of the relay's own `events` table in batches under a lease (one
// UPDATE … RETURNING, each task's events kept in order as the relay keeps them), sign each with
// Standard Webhooks HMAC (node:crypto), POST through one undici Pool per receiver origin (PER_HOST
// in flight, 8 by default), and record the settled attempts (each event's new state + its
// delivery_attempts row) in batched transactions, WAL + synchronous=FULL: a batch is written
// RECORD_DELAY_MS (20) after its first attempt settled or at BATCH attempts, while the next
// webhooks are already on their way (the lease keeps a settled event from being claimed again).
//
//   DATABASE_PATH=... [PER_HOST=8] [BATCH=64] [RECORD_DELAY_MS=20] node bench/proto/delivery.mjs
// prints "proto-delivery ready" once its statements are prepared, then drains what is due.
// The claim, signing and recording are shared with the queue prototype (bench/proto/queue-delivery.mjs),
// which passes its own `transport` (a broker publish in place of the POST).
import { fileURLToPath } from "node:url";
import { Pool } from "undici";
import { alarm, newId, onStop, openSqlite, perTurn, webhookSigner } from "./common.mjs";

/** Retry delays after a failed attempt (the relay's default schedule starts the same way). */
const RETRY_MS = [5_000, 30_000, 120_000, 600_000];

/**
 * The HTTP transport: one undici Pool per receiver origin, `perHost` connections. A transport keys
 * each claimed row (at most `perHost` in flight per key), sends it with the signed headers and
 * settles as { ok, code, error }; `close()` on stop.
 */
export function httpTransport({ perHost = 8, timeoutMs = 10_000 } = {}) {
  const pools = new Map();
  const poolOf = (origin) => {
    let p = pools.get(origin);
    if (!p)
      pools.set(origin, (p = new Pool(origin, { connections: perHost, pipelining: 1, keepAliveTimeout: 60_000 })));
    return p;
  };
  return {
    route(row) {
      const url = new URL(row.callback_url);
      return { key: url.origin, path: `${url.pathname}${url.search}` };
    },
    send(item, headers) {
      return poolOf(item.key)
        .request({
          path: item.path,
          method: "POST",
          headers: { "content-type": "application/json", "user-agent": "genrelay-proto", ...headers },
          body: item.event.payload,
          headersTimeout: timeoutMs,
          bodyTimeout: timeoutMs,
        })
        .then(
          async (res) => {
            await res.body.dump();
            return { ok: res.statusCode >= 200 && res.statusCode < 300, code: res.statusCode, error: null };
          },
          (err) => ({ ok: false, code: null, error: String(err?.code ?? err?.message ?? err) }),
        );
    },
    close: () => Promise.all([...pools.values()].map((p) => p.close())),
  };
}

/**
 * `recordDelayMs`: settled attempts wait up to this long (or until `batch` of them) to be recorded
 * together; 0 records once per event-loop turn.
 */
export function sqliteDelivery(
  db,
  {
    perHost = 8,
    batch = 64,
    recordDelayMs = 20,
    leaseMs = 60_000,
    timeoutMs = 10_000,
    onIdle = () => {},
    transport = httpTransport({ perHost, timeoutMs }),
  } = {},
) {
  const token = newId("own");
  const claim = db.prepare(
    `UPDATE events SET claimed_until = @until, claim_token = @token
      WHERE seq IN (SELECT seq FROM events e
                     WHERE delivery_status = 'pending' AND next_attempt_at <= @now AND (claimed_until IS NULL OR claimed_until < @now)
                       AND NOT EXISTS (SELECT 1 FROM events e2 WHERE e2.task_id = e.task_id AND e2.sequence < e.sequence AND e2.delivery_status = 'pending')
                     ORDER BY next_attempt_at, seq LIMIT @limit)
      RETURNING seq, id, client_id, task_id, type, payload, callback_url, attempts, round_attempts`,
  );
  const nextDue = db.prepare(
    "SELECT min(next_attempt_at) AS at FROM events WHERE delivery_status = 'pending' AND (claimed_until IS NULL OR claimed_until < ?)",
  );
  const succeeded = db.prepare(
    `UPDATE events SET delivery_status = 'succeeded', attempts = attempts + 1, round_attempts = round_attempts + 1, last_attempt_at = @at,
            last_status_code = @code, last_error = NULL, delivered_at = @now, next_attempt_at = NULL, claimed_until = NULL, claim_token = NULL
      WHERE seq = @seq AND claim_token = @token`,
  );
  const retry = db.prepare(
    `UPDATE events SET attempts = attempts + 1, round_attempts = round_attempts + 1, last_attempt_at = @at, last_status_code = @code,
            last_error = @error, next_attempt_at = @next, claimed_until = NULL, claim_token = NULL
      WHERE seq = @seq AND claim_token = @token`,
  );
  const attempt = db.prepare(
    `INSERT INTO delivery_attempts (id, event_id, task_id, client_id, event_type, url, attempted_at, status_code, latency_ms, outcome, error)
     VALUES (@id, @event_id, @task_id, @client_id, @event_type, @url, @at, @code, @latency, @outcome, @error)`,
  );
  const secretOf = db.prepare("SELECT webhook_secret FROM clients WHERE id = ?");
  const signers = new Map();
  const signerOf = (clientId) => {
    let s = signers.get(clientId);
    if (!s) signers.set(clientId, (s = webhookSigner(secretOf.get(clientId).webhook_secret)));
    return s;
  };
  const queue = [];
  const busy = new Map();
  let inFlight = 0;
  let dry = false;
  const sleep = alarm(() => {
    dry = false;
    pump();
  });
  let stopped = false;

  const writeResults = db.transaction((results) => {
    const now = Date.now();
    for (const r of results) {
      const { ok } = r;
      const params = { seq: r.event.seq, token, at: r.at, code: r.code, now };
      if (ok) succeeded.run(params);
      else
        retry.run({
          ...params,
          error: r.error ?? `HTTP ${r.code}`,
          next: now + RETRY_MS[Math.min(r.event.round_attempts, RETRY_MS.length - 1)],
        });
      attempt.run({
        id: newId("att", r.at),
        event_id: r.event.id,
        task_id: r.event.task_id,
        client_id: r.event.client_id,
        event_type: r.event.type,
        url: r.event.callback_url,
        at: r.at,
        code: r.code,
        latency: r.latency,
        outcome: ok ? "succeeded" : "failed",
        error: r.error,
      });
    }
  });
  const record = perTurn((results) => writeResults(results), { delayMs: recordDelayMs, max: batch });

  function claimMore() {
    const now = Date.now();
    const rows = claim.all({ now, until: now + leaseMs, token, limit: batch }).sort((a, b) => a.seq - b.seq);
    for (const row of rows) queue.push({ event: row, ...transport.route(row) });
    dry = rows.length < batch;
  }

  function send(item) {
    const at = Date.now();
    const ts = Math.floor(at / 1000);
    const { event } = item;
    const headers = {
      "webhook-id": event.id,
      "webhook-timestamp": String(ts),
      "webhook-signature": signerOf(event.client_id)(event.id, ts, event.payload),
    };
    transport.send(item, headers).then(({ ok, code, error }) => {
      inFlight--;
      busy.set(item.key, busy.get(item.key) - 1);
      record({ event, at, ok, code, error, latency: Date.now() - at });
      pump();
    });
  }

  /** Starts what has room, claims more when the local queue runs low, sleeps until the next due row when dry. */
  function pump() {
    if (stopped) return;
    if (queue.length < batch / 2 && !dry) claimMore();
    for (let i = 0; i < queue.length; ) {
      const item = queue[i];
      const n = busy.get(item.key) ?? 0;
      if (n >= perHost) {
        i++;
        continue;
      }
      queue.splice(i, 1);
      busy.set(item.key, n + 1);
      inFlight++;
      send(item);
    }
    if (dry && queue.length === 0 && !sleep.armed) {
      const now = Date.now();
      const at = nextDue.get(now).at;
      if (at === null && inFlight === 0) onIdle();
      // Nothing pending: look again in a second (the outbox is pre-written; new rows come from elsewhere).
      sleep.later(at === null ? 1_000 : Math.max(0, Math.min(1_000, at - now)));
    }
  }

  return {
    start: () => pump(),
    /** New rows were written (the end-to-end prototype calls this after recording completions). */
    wake: () => sleep.now(),
    async stop() {
      stopped = true;
      sleep.cancel();
      await transport.close();
    },
  };
}

/**
 * Runs a prototype process: drains DATABASE_PATH's due events through `transport` (PER_HOST,
 * BATCH, RECORD_DELAY_MS from the environment), printing "<name> ready" then "<name> idle".
 */
export function runDeliveryProcess(name, transport) {
  const db = openSqlite(process.env.DATABASE_PATH);
  let idle = false;
  const perHost = Number(process.env.PER_HOST ?? 8);
  const delivery = sqliteDelivery(db, {
    perHost,
    batch: Number(process.env.BATCH ?? 64),
    recordDelayMs: Number(process.env.RECORD_DELAY_MS ?? 20),
    transport: transport ?? httpTransport({ perHost }),
    onIdle: () => {
      if (!idle) process.stdout.write(`${name} idle\n`);
      idle = true;
    },
  });
  process.stdout.write(`${name} ready\n`);
  delivery.start();
  onStop(async () => {
    await delivery.stop();
    db.close();
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) runDeliveryProcess("proto-delivery");
