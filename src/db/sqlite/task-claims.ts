import { and, asc, eq, gt, gte, inArray, isNull, lt, lte, or, type Placeholder, sql, type SQL } from "drizzle-orm";
import { interleave, pickWithinRoom, type ClientRoom } from "../../store/fairness.js";
import type { InFlightTask } from "../../store/store.js";
import type { TaskRow } from "../../store/rows.js";
import { clientRoom, type TaskClaimOperations } from "../kit/task-claims.js";
import type { SqliteContext } from "./context.js";
import type { Db } from "./open.js";
import { clientOf, jsonList, prepared } from "./prepared.js";
import { clients, tasks } from "./schema.js";
import type { TaskPhase } from "../../statuses.js";
import { inPickedOrder } from "../kit/claim-order.js";
import { wakeAt } from "../kit/due-time.js";

/** The claim side of the TaskStore on SQLite: leases on due tasks, due times, the accounts and counts the loops read. */
export function sqliteTaskClaims(s: SqliteContext): TaskClaimOperations {
  const db = s.database.db;
  return {
    claimFairly: (account, o) => s.attemptCommits.runAtomic(() => claimFairly(db, { account, ...o })),
    claimDue: (phase, account, o) => s.attemptCommits.runAtomic(() => claimDue(db, { phase, account, ...o })),
    // Several statements (chunks of ids): in a savepoint of its own.
    claimIds: (ids, phase, o) => s.attemptCommits.run(() => claimIds(db, { ids, phase, ...o })),
    claimExpired: (o) => s.attemptCommits.runAtomic(() => claimExpired(db, o)),
    claimAcrossClients: (phase, o) => s.attemptCommits.run(() => claimAcrossClients(db, phase, o)),
    nextDueAt: async (phase, now) => nextDueAt(db, phase, now),
    nextExpiryAt: async () => nextExpiryAt(db),
    accountsWithDue: async (phase, now) => accountsWithDue(db, phase, now),
    accountsInFlight: async () => accountsInFlight(db),
    countRunning: async (account) => countRunning(db, account),
    listInFlight: async (account) => listInFlight(db, account),
  };
}

/** Not under a live lease at `now`. */
export function unclaimed(now: number | Placeholder): SQL {
  return or(isNull(tasks.claimedUntil), lt(tasks.claimedUntil, now))!;
}

interface Candidate {
  id: string;
  max_running: number | null;
  running: number;
}

/**
 * Picks the waiting tasks to submit next on one account, round-robin across clients: every client's
 * oldest due task comes before any client's second, and among clients the one admitted longest ago
 * goes first. A flood from one client therefore cannot starve another. Clients at their own running
 * cap are skipped. Each client's queue is read through the (phase, account, client, next_run_at)
 * index, at most `limit` rows deep, so the cost does not grow with the backlog. Then the picked
 * rows are claimed under a lease.
 */
export function claimFairly(
  db: Db,
  opts: { account: string; now: number; leaseMs: number; token: string; limit: number },
): TaskRow[] {
  if (opts.limit <= 0) return [];
  const { account, now } = opts;
  const candidates = db.all<Candidate>(sql`
    SELECT c.id, c.max_running,
           (SELECT count(*) FROM tasks r WHERE r.phase = 'submitted' AND r.upstream_account = ${account} AND r.client_id = c.id) AS running
    FROM clients c
    WHERE c.upstream_account = ${account}
      AND EXISTS (SELECT 1 FROM tasks t
                  WHERE t.phase = 'waiting' AND t.upstream_account = ${account} AND t.client_id = c.id
                    AND t.next_run_at <= ${now} AND (t.claimed_until IS NULL OR t.claimed_until < ${now}))
    ORDER BY c.last_admitted_at, c.id`);
  const queues: string[][] = [];
  for (const c of candidates) {
    const room = clientRoom(c.max_running, c.running, opts.limit);
    if (room <= 0) continue;
    const ids = db.all<{ id: string }>(sql`
      SELECT id FROM tasks
      WHERE phase = 'waiting' AND upstream_account = ${account} AND client_id = ${c.id}
        AND next_run_at <= ${now} AND (claimed_until IS NULL OR claimed_until < ${now})
      ORDER BY next_run_at, id
      LIMIT ${room}`);
    queues.push(ids.map((r) => r.id));
  }
  const picked = interleave(queues, opts.limit);
  if (picked.length === 0) return [];
  const claimed = claimDue(db, {
    phase: "waiting",
    account,
    now,
    leaseMs: opts.leaseMs,
    token: opts.token,
    limit: picked.length,
    ids: picked,
  });
  // Submit in the order picked (claimDue returns rows in storage order).
  return inPickedOrder(claimed, picked);
}

/**
 * Claims due tasks of one phase and account with a lease; one UPDATE … RETURNING, on a statement
 * prepared once per shape (with or without an id list, observed only or not): the id list is bound
 * as one JSON text (`jsonList`), so no query is built per call (issue #43: 58 µs a task end to end).
 */
export function claimDue(
  db: Db,
  opts: {
    phase: TaskPhase;
    account: string;
    now: number;
    leaseMs: number;
    token: string;
    limit: number;
    ids?: string[];
    /** Only tasks read at least once before (poll_count > 0). */
    observedOnly?: boolean;
  },
): TaskRow[] {
  if (opts.limit <= 0) return [];
  if (opts.ids?.length === 0) return [];
  const listed = opts.ids !== undefined;
  const observed = opts.observedOnly === true;
  const statement = prepared(db, `tasks.claimDue:${listed}:${observed}`, () => {
    // With an id list, the rows are reached by their ids (the primary key), the other conditions
    // checked on each: the unary `+` keeps the planner off the (phase, account, next_run_at) index,
    // whose range holds every due task of the account (it walked all of them on each claim, ahead of
    // a bloom filter of the ids: a cost that grew with the backlog).
    const conditions: SQL[] = listed
      ? [
          sql`${tasks.id} IN (SELECT value FROM json_each(${sql.placeholder("ids")}))`,
          sql`+${tasks.phase} = ${sql.placeholder("phase")}`,
          sql`+${tasks.upstreamAccount} = ${sql.placeholder("account")}`,
          sql`+${tasks.nextRunAt} <= ${sql.placeholder("now")}`,
          unclaimed(sql.placeholder("now")),
        ]
      : [
          eq(tasks.phase, sql.placeholder("phase")),
          eq(tasks.upstreamAccount, sql.placeholder("account")),
          lte(tasks.nextRunAt, sql.placeholder("now")),
          unclaimed(sql.placeholder("now")),
        ];
    if (observed) conditions.push(gt(tasks.pollCount, 0));
    const due = db
      .select({ id: tasks.id })
      .from(tasks)
      .where(and(...conditions))
      .orderBy(asc(tasks.nextRunAt), asc(tasks.id))
      .limit(sql.placeholder("limit"));
    return db
      .update(tasks)
      .set({ claimedUntil: sql`${sql.placeholder("until")}`, claimToken: sql`${sql.placeholder("token")}` })
      .where(inArray(tasks.id, due))
      .returning()
      .prepare();
  });
  return statement.all({
    phase: opts.phase,
    account: opts.account,
    now: opts.now,
    limit: opts.limit,
    until: opts.now + opts.leaseMs,
    token: opts.token,
    ...(listed ? { ids: jsonList(opts.ids!) } : {}),
  });
}

/**
 * Claims the given tasks of a phase, due or not, that no one else holds (one statement prepared once:
 * the ids as one JSON text), reached by their ids: the `+` keeps the planner off the phase's indexes,
 * whose range is every task of the phase.
 */
export function claimIds(
  db: Db,
  opts: { ids: string[]; phase: TaskPhase; now: number; leaseMs: number; token: string },
): TaskRow[] {
  if (opts.ids.length === 0) return [];
  return prepared(db, "tasks.claimIds", () =>
    db
      .update(tasks)
      .set({ claimedUntil: sql`${sql.placeholder("until")}`, claimToken: sql`${sql.placeholder("token")}` })
      .where(
        and(
          sql`${tasks.id} IN (SELECT value FROM json_each(${sql.placeholder("ids")}))`,
          sql`+${tasks.phase} = ${sql.placeholder("phase")}`,
          unclaimed(sql.placeholder("now")),
        ),
      )
      .returning()
      .prepare(),
  ).all({
    ids: jsonList(opts.ids),
    phase: opts.phase,
    now: opts.now,
    until: opts.now + opts.leaseMs,
    token: opts.token,
  });
}

/**
 * Claims waiting tasks past their expiry that were never offered upstream, due or not (one held back
 * by concurrency, a pause or backoff still expires on time).
 */
export function claimExpired(db: Db, opts: { now: number; leaseMs: number; token: string; limit: number }): TaskRow[] {
  const expired = db
    .select({ id: tasks.id })
    .from(tasks)
    .where(
      and(eq(tasks.phase, "waiting"), eq(tasks.submitAttempts, 0), lte(tasks.expiresAt, opts.now), unclaimed(opts.now)),
    )
    .orderBy(asc(tasks.expiresAt))
    .limit(opts.limit);
  return db
    .update(tasks)
    .set({ claimedUntil: opts.now + opts.leaseMs, claimToken: opts.token })
    .where(inArray(tasks.id, expired))
    .returning()
    .all();
}

/**
 * Due, unleased tasks of a phase, round-robin across clients (TaskStore.claimAcrossClients): every
 * client's oldest due task before any client's second; clients ranked by `rank` (lowest first),
 * then by how long their oldest task has waited. Each client's queue is read at most `limit` deep;
 * with `clientRoom` (a worker's fair pool), a client with no room is not read, and the others take
 * no more than theirs (pickWithinRoom, asked before each pick).
 */
export function claimAcrossClients(
  db: Db,
  phase: TaskPhase,
  opts: {
    now: number;
    leaseMs: number;
    token: string;
    limit: number;
    rank: (clientId: string) => number;
    clientRoom?: ClientRoom | undefined;
  },
): TaskRow[] {
  if (opts.limit <= 0) return [];
  const { now } = opts;
  const candidates = db.all<{ client_id: string; first: number }>(sql`
    SELECT client_id, min(next_run_at) AS first FROM tasks
    WHERE phase = ${phase} AND next_run_at <= ${now} AND (claimed_until IS NULL OR claimed_until < ${now})
    GROUP BY client_id`);
  candidates.sort((a, b) => opts.rank(a.client_id) - opts.rank(b.client_id) || a.first - b.first);
  const none = new Map<string, number>();
  const queued = candidates
    .filter((c) => !opts.clientRoom || opts.clientRoom(c.client_id, none) > 0)
    .flatMap((c) =>
      db
        .all<{ id: string }>(sql`
          SELECT id FROM tasks
          WHERE phase = ${phase} AND client_id = ${c.client_id} AND next_run_at <= ${now} AND (claimed_until IS NULL OR claimed_until < ${now})
          ORDER BY next_run_at, id LIMIT ${opts.limit}`)
        .map((r) => ({ id: r.id, clientId: c.client_id, host: "" })),
    );
  // Clients in rank order, one task each per turn, each within its room.
  const picked = pickWithinRoom(queued, opts.limit, () => Infinity, opts.clientRoom).map((t) => t.id);
  const claimed = claimIds(db, { ids: picked, phase, now, leaseMs: opts.leaseMs, token: opts.token });
  return inPickedOrder(claimed, picked);
}

/**
 * Earliest next_run_at among unclaimed tasks of a phase (any account), for the loop to sleep until.
 * Rows under a lease are skipped: their holder reschedules them, and an abandoned lease is found by
 * the loop's idle wake-up. Walks the (phase, next_run_at) index, so it costs the same at any backlog.
 */
export function nextDueAt(db: Db, phase: TaskPhase, now: number): number | null {
  // Prepared once: each loop asks after every turn it works (the submitter and the poller).
  const row = prepared(db, "tasks.nextDueAt", () =>
    db
      .select({ at: tasks.nextRunAt })
      .from(tasks)
      .where(
        and(
          eq(tasks.phase, sql.placeholder("phase")),
          sql`${tasks.nextRunAt} IS NOT NULL`,
          unclaimed(sql.placeholder("now")),
        ),
      )
      .orderBy(asc(tasks.nextRunAt))
      .limit(1)
      .prepare(),
  ).get({ phase, now });
  // A lease that runs out (its holder died) makes its row due again then: wake for it, not at the idle timer.
  const lease = prepared(db, "tasks.nextLeaseEnd", () =>
    db
      .select({ at: sql<number | null>`min(${tasks.claimedUntil})` })
      .from(tasks)
      .where(and(eq(tasks.phase, sql.placeholder("phase")), gte(tasks.claimedUntil, sql.placeholder("now"))))
      .prepare(),
  ).get({ phase, now });
  return wakeAt(row?.at ?? null, lease?.at ?? null);
}

/** Earliest expiry among waiting tasks that can still expire, for the submitter to wake at. */
export function nextExpiryAt(db: Db): number | null {
  const row = prepared(db, "tasks.nextExpiryAt", () =>
    db
      .select({ at: tasks.expiresAt })
      .from(tasks)
      .where(and(eq(tasks.phase, "waiting"), sql`${tasks.expiresAt} IS NOT NULL`, eq(tasks.submitAttempts, 0)))
      .orderBy(asc(tasks.expiresAt))
      .limit(1)
      .prepare(),
  ).get();
  return row?.at ?? null;
}

/** Accounts that have tasks in a phase due now: one index probe per account (accounts are few), both statements prepared once. */
export function accountsWithDue(db: Db, phase: TaskPhase, now: number): string[] {
  const accounts = prepared(db, "clients.accounts", () =>
    db.selectDistinct({ account: clients.upstreamAccount }).from(clients).prepare(),
  ).all();
  const due = prepared(db, "tasks.dueOfAccount", () =>
    db
      .select({ one: sql<number>`1` })
      .from(tasks)
      .where(
        and(
          eq(tasks.phase, sql.placeholder("phase")),
          eq(tasks.upstreamAccount, sql.placeholder("account")),
          lte(tasks.nextRunAt, sql.placeholder("now")),
          unclaimed(sql.placeholder("now")),
        ),
      )
      .limit(1)
      .prepare(),
  );
  return accounts.map((r) => r.account).filter((account) => due.get({ phase, account, now }) !== undefined);
}

/** Accounts with tasks in flight upstream. */
export function accountsInFlight(db: Db): string[] {
  return prepared(db, "tasks.accountsInFlight", () =>
    db.selectDistinct({ account: tasks.upstreamAccount }).from(tasks).where(eq(tasks.phase, "submitted")).prepare(),
  )
    .all()
    .map((r) => r.account);
}

/** Tasks submitted upstream and not yet terminal: they occupy the account's concurrency. */
export function countRunning(db: Db, account: string): number {
  const row = prepared(db, "tasks.countRunning", () =>
    db
      .select({ n: sql<number>`count(*)` })
      .from(tasks)
      .where(and(eq(tasks.phase, "submitted"), eq(tasks.upstreamAccount, sql.placeholder("account"))))
      .prepare(),
  ).get({ account });
  return row?.n ?? 0;
}

/** The in-flight tasks of an account, narrow rows (a list sweep compares them with what it read). */
export function listInFlight(db: Db, account: string): InFlightTask[] {
  // Every poll sweep reads it: prepared once on the connection, each row mapped by one object
  // literal (issue #43: drizzle building the select and mapping its rows was about 50 µs a task end
  // to end under the profiler).
  const rows = prepared(db, "tasks.listInFlight", () =>
    clientOf(db)
      .prepare(
        "SELECT id, upstream_task_id, status, submitted_at, type, model, traceparent, tracestate FROM tasks WHERE phase = 'submitted' AND upstream_account = ?",
      )
      .raw(true),
  ).all(account) as [
    string,
    string | null,
    InFlightTask["status"],
    number | null,
    InFlightTask["type"],
    string,
    string | null,
    string | null,
  ][];
  return rows.map((r) => ({
    id: r[0],
    upstreamTaskId: r[1],
    status: r[2],
    submittedAt: r[3],
    type: r[4],
    model: r[5],
    traceparent: r[6],
    tracestate: r[7],
  }));
}
