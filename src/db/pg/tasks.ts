import type { CreateResult, NewTaskRequest, TaskStore } from "../../store/store.js";
import type { TaskRow } from "../../store/rows.js";
import { T, unclaimed, NO_RESERVATIONS, opt, columnsOf, CHANNEL } from "./mapping.js";
import { pgTaskClaims } from "./task-claims.js";
import { CLIENT_TASK_FOR_CHANGE, TASK_FOR_CHANGE } from "./watch-barrier.js";
import { tasks } from "./schema.js";
import { DELIVERY_FAILING_TASK } from "../kit/delivery-failing.js";
import type { PgContext } from "./context.js";
import { PgIntakeBatches } from "./intake.js";
import { type CreditBooks, lockCredit, readCredit } from "./credit-books.js";
import { storedBytesOfClient } from "./stored-bytes-log.js";
import { exactStoredBytes, grantStillHolds, type TakenRoom } from "./stored-bytes-grants.js";

/** Every column of a task but its output, for list reads that may leave the output in the database. */
const LISTED_COLUMNS = columnsOf(tasks)
  .map(([, name]) => name)
  .filter((name) => name !== "output_json")
  .join(", ");

/** A created task's stored bytes onto its client's (client_storage_log: appending waits on no one). */
const LOG_STORED_BYTES = "INSERT INTO client_storage_log (client_id, bytes) VALUES ($1, $2)";

/** The TaskStore on PostgreSQL: intake, transitions, submissions, reads and pruning; the claims are task-claims.ts. */
export function pgTasks(s: PgContext): TaskStore {
  const { q, one } = s;
  /**
   * A creation in a transaction of its own: the idempotency check, the cap and budget decision under
   * the client's credit lock, the insert. `room`: what it took of this instance's grant (null: room
   * ran out, so it is decided against the exact stored bytes; undefined: no bound).
   */
  const decideAndInsert = (req: NewTaskRequest, room: TakenRoom | null | undefined) =>
    s.tx(async (c): Promise<CreateResult & { kept: number }> => {
      const { row } = req;
      const existing = await one(
        "SELECT * FROM tasks WHERE client_id = $1 AND idempotency_key = $2",
        [row.clientId, row.idempotencyKey],
        c,
      );
      if (existing) return { task: T.row(existing), replayed: true, kept: 0 };
      // With a cap or a credit limit, the client's credit lock serialises its deciders, so the checks
      // see each other (credit-books.ts); without either there is nothing to decide and creations
      // run side by side.
      const position =
        req.needs.waiting || req.needs.credit ? await s.creditPositionIn(c, row.clientId, true) : undefined;
      const waiting = req.needs.waiting
        ? Number(
            (await one(
              "SELECT count(*) AS n FROM tasks WHERE client_id = $1 AND phase = 'waiting'",
              [row.clientId],
              c,
            ))!.n,
          )
        : 0;
      const learnedPrice = req.needs.credit && row.priceKey ? await s.learnedPriceIn(c, row.priceKey) : null;
      // With a storage bound: admitted on the room this instance took while its grant row still holds
      // (FOR KEY SHARE until this commits), else the exact figure with every grant taken back, locked
      // until this commits (stored-bytes-grants.ts).
      let storedBytes: number | undefined;
      if (room !== undefined) {
        const bytes = row.storedBytes ?? 0;
        const holds =
          room !== null && (await grantStillHolds(c, row.clientId, s.grants.holder, bytes, req.storedBytesLimit!));
        if (!holds) {
          s.grants.drop(row.clientId);
          storedBytes = await exactStoredBytes(c, row.clientId);
        }
      }
      const reserved = req.admit({
        waiting,
        position: req.needs.credit ? position : undefined,
        learnedPrice,
        storedBytes,
      });
      const ins = T.insert("tasks", { ...row, pointsReserved: reserved });
      const inserted = await one(
        `${ins.sql} ON CONFLICT (client_id, idempotency_key) DO NOTHING RETURNING *`,
        ins.values,
        c,
      );
      if (!inserted) {
        // A concurrent creation with the same key committed first: it is the original.
        const original = await one(
          "SELECT * FROM tasks WHERE client_id = $1 AND idempotency_key = $2",
          [row.clientId, row.idempotencyKey],
          c,
        );
        return { task: T.row(original!), replayed: true, kept: 0 };
      }
      await q(LOG_STORED_BYTES, [row.clientId, Number(inserted.stored_bytes)], c);
      // Bytes decided against the exact figure spent no grant.
      const kept = storedBytes === undefined ? Number(inserted.stored_bytes) : 0;
      await s.applyCredits(c, row.clientId, row.id, { charged: 0, refunded: 0, reserved }, row.createdAt);
      return { task: T.row(inserted), replayed: false, kept };
    });
  const single: TaskStore["create"] = async (req) => {
    // Room is taken before the transaction: a refill is a short transaction of its own.
    const room =
      req.storedBytesLimit == null
        ? undefined
        : await s.grants.take(req.row.clientId, req.row.storedBytes ?? 0, req.storedBytesLimit);
    let kept = 0;
    let created: CreateResult;
    try {
      ({ kept, ...created } = await decideAndInsert(req, room));
    } finally {
      if (room) s.grants.settle(room, kept);
    }
    // After the commit, so a submitter woken here sees the task.
    if (!created.replayed)
      await s.wakeSubmitter([created.task.upstreamAccount], created.task.expiresAt == null).catch(() => {});
    return created;
  };
  // Creations without a cap or credit limit are group-committed (one multi-row INSERT per turn).
  const batches = new PgIntakeBatches({
    q: (sql, values) => q(sql, values),
    run: async (statement, values) => (await s.pool.query({ ...statement, values })).rows as Record<string, unknown>[],
    single,
    grants: s.grants,
    wake: (accounts, created) => s.wakeSubmitter(accounts, created),
    wakesHere: (accounts) => s.submitterHere(accounts),
    channel: CHANNEL,
  });
  return {
    ...pgTaskClaims(s),
    create: (req) => batches.create(req),
    transition: (task, patch, o) => s.tx((c) => s.transitionIn(c, task.id, patch, o)),
    reschedule: async (id, token, patch) => {
      const set = T.set(patch, 3);
      if (!set.sql) return opt(T, await one("SELECT * FROM tasks WHERE id = $1 AND claim_token = $2", [id, token]));
      const r = await one(`UPDATE tasks SET ${set.sql} WHERE id = $1 AND claim_token = $2 RETURNING *`, [
        id,
        token,
        ...set.values,
      ]);
      return r ? T.row(r) : undefined;
    },
    beginSubmission: (id, token, decide, o) =>
      s.tx(async (c) => {
        const raw = await one(`${TASK_FOR_CHANGE} FOR UPDATE OF t`, [id], c);
        if (!raw) return null;
        const current = T.row(raw);
        if (current.claimToken !== token) return null;
        // The books in one statement (credit-books.ts). Only a limited client's task that was never
        // offered upstream is decided against them: under the client's credit lock, read again
        // after it. Every other submission goes on without waiting for anything of its client.
        const decides = (b: CreditBooks | undefined) =>
          b !== undefined && b.position.limit !== null && !b.position.revoked && current.submitAttempts === 0;
        let books = await readCredit(c, s.pool, current.clientId, current.id, current.priceKey);
        if (decides(books)) {
          await lockCredit(c, current.clientId);
          books = await readCredit(c, s.pool, current.clientId, current.id, current.priceKey);
        }
        // Read with the books (a client without a row has none: read alone then).
        const learnedPrice = !current.priceKey
          ? null
          : books
            ? books.learnedPrice
            : await s.learnedPriceIn(c, current.priceKey);
        const position = books?.position;
        const reservations = decides(books) ? books!.reservations : NO_RESERVATIONS;
        const step = decide({ task: current, position, learnedPrice, reservations });
        const task = step.transition
          ? await s.transitionIn(c, id, step.patch, o, current)
          : await s.updateLeased(c, id, token, step.patch);
        return task ? { kind: step.kind, task } : null;
      }),
    decideAndTransition: (id, clientId, decide, o) =>
      s.tx(async (c) => {
        const raw = await one(
          clientId === null ? `${TASK_FOR_CHANGE} FOR UPDATE OF t` : `${CLIENT_TASK_FOR_CHANGE} FOR UPDATE OF t`,
          clientId === null ? [id] : [id, clientId],
          c,
        );
        if (!raw) return null;
        const before = T.row(raw);
        const patch = decide(before);
        if (patch === null) return { before, after: before };
        const after = await s.transitionIn(c, id, patch, o, before);
        return after ? { before, after } : null;
      }),
    find: async (id) => opt(T, await one("SELECT * FROM tasks WHERE id = $1", [id])),
    filesOf: async (id) => {
      const row = await one("SELECT client_id, files_json FROM tasks WHERE id = $1", [id]);
      return row ? { clientId: row.client_id as string, filesJson: row.files_json as string | null } : undefined;
    },
    findOfClient: async (clientId, id) =>
      opt(T, await one("SELECT * FROM tasks WHERE id = $1 AND client_id = $2", [id, clientId])),
    findByUpstreamId: async (account, upstreamTaskId) =>
      opt(
        T,
        await one("SELECT * FROM tasks WHERE upstream_account = $1 AND upstream_task_id = $2", [
          account,
          upstreamTaskId,
        ]),
      ),
    findByAnyId: async (id) => {
      const byId = await one("SELECT * FROM tasks WHERE id = $1", [id]);
      if (byId) return [T.row(byId)];
      return T.rows(await q("SELECT * FROM tasks WHERE upstream_task_id = $1 ORDER BY id", [id]));
    },
    list: async (q0) => {
      const where = ["client_id = $1"];
      const values: unknown[] = [q0.clientId];
      const add = (cond: (n: number) => string, v: unknown) => {
        values.push(v);
        where.push(cond(values.length));
      };
      if (q0.beforeId) add((n) => `id < $${n}`, q0.beforeId);
      if (q0.type) add((n) => `type = $${n}`, q0.type);
      if (q0.status) add((n) => `status = $${n}`, q0.status);
      if (q0.search) {
        add(
          (n) =>
            `(id = $${n} OR upstream_task_id = $${n} OR (metadata_json IS NOT NULL AND EXISTS (SELECT 1 FROM jsonb_each_text(metadata_json::jsonb) m WHERE m.value = $${n})))`,
          q0.search,
        );
      }
      if (q0.deliveryFailing) where.push(DELIVERY_FAILING_TASK);
      let columns = "*";
      if (q0.outputMaxBytes !== undefined) {
        // octet_length of a TOASTed value reads its size, not the value: a large output is never fetched.
        values.push(q0.outputMaxBytes);
        const over = `coalesce(octet_length(output_json) > $${values.length}, false)`;
        columns = `${LISTED_COLUMNS}, CASE WHEN ${over} THEN NULL ELSE output_json END AS output_json, ${over} AS output_omitted`;
      }
      values.push(q0.limit);
      const rows = await q(
        `SELECT ${columns} FROM tasks WHERE ${where.join(" AND ")} ORDER BY id DESC LIMIT $${values.length}`,
        values,
      );
      return rows.map((r) =>
        r.output_omitted === undefined ? T.row(r) : { ...T.row(r), outputOmitted: r.output_omitted === true },
      );
    },
    storedBytesOfClient: (clientId) => storedBytesOfClient(s.pool, clientId),
    listForSupport: async (q0) => {
      const where: string[] = [];
      const values: unknown[] = [];
      if (q0.clientId) where.push(`client_id = $${values.push(q0.clientId)}`);
      if (q0.status) where.push(`status = $${values.push(q0.status)}`);
      values.push(q0.limit);
      return T.rows(
        await q(
          `SELECT * FROM tasks ${where.length > 0 ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY id DESC LIMIT $${values.length}`,
          values,
        ),
      );
    },
    waitingAhead: async (account, id) =>
      Number(
        (await one("SELECT count(*) AS n FROM tasks WHERE phase = 'waiting' AND upstream_account = $1 AND id < $2", [
          account,
          id,
        ]))!.n,
      ),
    // One pass over the account's waiting tasks up to the page's last id, numbered; the page's ids kept.
    waitingAheadOfEach: async (account, ids) => {
      if (ids.length === 0) return new Map();
      let last = ids[0]!;
      for (const id of ids) if (id > last) last = id;
      const rows = await q(
        `SELECT id, ahead FROM (
           SELECT id, row_number() OVER (ORDER BY id) - 1 AS ahead FROM tasks
            WHERE phase = 'waiting' AND upstream_account = $1 AND id <= $2
         ) w WHERE id = ANY($3::text[])`,
        [account, last, [...ids]],
      );
      return new Map(rows.map((r) => [r.id as string, Number(r.ahead)]));
    },
    unsubmittedOfClient: async (clientId, now) =>
      T.rows(
        await q(
          `SELECT * FROM tasks WHERE client_id = $1 AND phase = 'waiting' AND submit_attempts = 0 AND ${unclaimed(2)}`,
          [clientId, now],
        ),
      ),
    countsOfClient: async (clientId) => {
      const counts: Record<string, number> = { queued: 0, processing: 0, succeeded: 0, failed: 0, canceled: 0 };
      for (const r of await q("SELECT status, count(*) AS n FROM tasks WHERE client_id = $1 GROUP BY status", [
        clientId,
      ]))
        counts[r.status as string] = Number(r.n);
      return counts;
    },
    hourlyCounts: async (clientId, since) =>
      (
        await q(
          "SELECT (created_at / 3600000) * 3600000 AS hour, status, count(*) AS n FROM tasks WHERE client_id = $1 AND created_at >= $2 GROUP BY 1, 2",
          [clientId, since],
        )
      ).map((r) => ({
        hour: Number(r.hour),
        status: r.status as TaskRow["status"],
        n: Number(r.n),
      })),
    recentCallbackUrls: async (clientId) => [
      ...new Set(
        (
          await q(
            "SELECT callback_url FROM tasks WHERE client_id = $1 AND callback_url IS NOT NULL ORDER BY id DESC LIMIT 500",
            [clientId],
          )
        ).map((r) => r.callback_url as string),
      ),
    ],
    pruneFinished: (before, batch) =>
      s.tx(async (c) => {
        // SKIP LOCKED: several instances prune side by side, each its own batch, never waiting on another.
        const ids = (
          await q(
            `SELECT t.id FROM tasks t WHERE t.phase = 'done' AND t.completed_at < $1
               AND NOT EXISTS (SELECT 1 FROM events e WHERE e.task_id = t.id AND e.delivery_status = 'pending')
             LIMIT $2 FOR UPDATE SKIP LOCKED`,
            [before, batch],
            c,
          )
        ).map((r) => r.id as string);
        if (ids.length === 0) return 0;
        // The deletes' triggers take what these rows held off their clients' stored bytes (client_storage_log).
        await q("DELETE FROM delivery_attempts WHERE task_id = ANY($1::text[])", [ids], c);
        await q("DELETE FROM events WHERE task_id = ANY($1::text[])", [ids], c);
        await q("DELETE FROM tasks WHERE id = ANY($1::text[])", [ids], c);
        return ids.length;
      }),
  };
}
