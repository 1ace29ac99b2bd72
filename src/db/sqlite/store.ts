import type {
  AccountStore,
  ClientStore,
  CreateResult,
  KeyHealthStore,
  EventStore,
  NoticeStore,
  NewTaskRequest,
  OpsStore,
  OutputStore,
  RateLimitStore,
  SessionStore,
  Store,
  SubmissionContext,
  TaskStore,
  TransitionOptions,
  TransitionRules,
  WebhookEndpointStore,
} from "../../store/store.js";
import type { NewTaskRow, TaskRow } from "../../store/rows.js";
import { applyCreditChange, creditPosition, findLearnedPrice, learnPrice, reservationsAround } from "./clients.js";
import { insertPrepared as insertEventPrepared } from "./events.js";
import { turnTime } from "../../next-turn.js";
import { GroupCommit } from "./group-commit.js";
import { WalSync } from "./wal-sync.js";
import type { Database_, Db } from "./open.js";
import {
  countByPhaseForClient,
  findTaskByIdempotencyKeyPrepared,
  findTaskPrepared,
  insertTaskPrepared,
  wakeWaitingOfClient,
  writeTask,
} from "./tasks.js";
import { planTransition } from "../../store/transition-plan.js";
import type { DbOrTx } from "./tx.js";
import { sqliteTasks } from "./tasks.js";
import { storedBytesTally } from "./stored-bytes.js";
import { sqliteEvents } from "./events.js";
import { sqliteClients } from "./clients.js";
import { sqliteAccounts } from "./accounts.js";
import { sqliteKeyHealth } from "./key-health.js";
import { sqliteNotices } from "./notices.js";
import { sqliteSessions } from "./sessions.js";
import { sqliteOps } from "./ops.js";
import type { SqliteContext } from "./context.js";
import { sqliteRateLimits } from "./rate-limits.js";
import { endpointsOf, fanOutEvent, sqliteWebhookEndpoints } from "./webhook-endpoints.js";
import { subscribedTypes } from "../../store/endpoint-fanout.js";
import { sqliteOutputs } from "./outputs.js";

const NO_RESERVATIONS = { inFlight: 0, ahead: 0, others: 0 };

/**
 * The state change of TaskStore.transition inside the caller's transaction (or its own statement
 * run when `db` is the database itself: tests seed states this way, synchronously).
 */
export function transitionIn(
  db: Db,
  rules: TransitionRules,
  id: string,
  patch: Partial<NewTaskRow>,
  opts: TransitionOptions,
  /** The row as read earlier in the same transaction, if the caller has it (else read here). */
  current?: TaskRow,
): TaskRow | undefined {
  const { now, token } = opts;
  // The database itself, not a drizzle tx: its prepared statements run inside the caller's open transaction.
  const before = current ?? findTaskPrepared(db, id);
  if (!before || (token && before.claimToken !== token)) return undefined;
  // Planned once (store/transition-plan.ts), applied here: one write of the row, then the books and the outbox.
  // A change of status writes an event: the client's endpoints decide which types are written and who gets them.
  const endpoints =
    patch.status !== undefined && patch.status !== before.status ? endpointsOf(db, before.clientId) : undefined;
  const plan = planTransition(rules, before, patch, opts, subscribedTypes(endpoints ?? []));
  if (Object.keys(plan.patch).length > 0 && !writeTask(db, id, token, plan.patch, before)) return undefined;
  const { clientId } = plan.after;
  if (plan.credit) applyCreditChange(db, clientId, id, plan.credit, now);
  if (plan.wake) wakeWaitingOfClient(db, clientId, now);
  if (plan.learn) learnPrice(db, plan.learn.priceKey, plan.learn.points, now);
  if (plan.event) {
    insertEventPrepared(db, plan.event);
    fanOutEvent(db, plan.event, endpoints);
  }
  return plan.after;
}

/** Turns of the event loop an intake commit waits while creations keep arriving (GroupCommit's fillTurns). */
export const INTAKE_FILL_TURNS = 2;

/**
 * How long a workers' commit waits for the records of attempts on the wire (GroupCommit's holdMs):
 * receivers on loopback or a LAN answer within it, so the records of a key's attempts in flight
 * share one transaction, one fsync and one refill claim; a slow receiver costs others at most this.
 */
export const RECORD_HOLD_MS = 2;

/**
 * How long a workers' commit holding only attempts' records waits for more of them (GroupCommit's
 * lingerMs; a claim queued into it ends the wait at RECORD_HOLD_MS, and RECORDS_PER_COMMIT records
 * at once): a record's commit is then shared by tens of attempts, as the prototype's batched
 * completion (20 ms or 64 records) does. A record settles, and its webhook shows delivered, up to
 * this much later; the attempts themselves never wait for it (their slots are freed as it is queued).
 */
export const RECORD_LINGER_MS = 20;

/**
 * The store on one SQLite file (better-sqlite3). Every operation runs synchronously inside and
 * returns a settled promise: a transaction never spans an await, so no other work interleaves
 * with it. Creations and delivery attempts go through group commit (one fsync per batch).
 */
export class SqliteStore implements Store, SqliteContext {
  readonly dialect = "sqlite" as const;
  readonly tasks: TaskStore;
  readonly events: EventStore;
  readonly keyHealth: KeyHealthStore;
  readonly webhookEndpoints: WebhookEndpointStore;
  readonly notices: NoticeStore;
  readonly clients: ClientStore;
  readonly accounts: AccountStore;
  readonly sessions: SessionStore;
  readonly limits: RateLimitStore;
  readonly ops: OpsStore;
  readonly outputs: OutputStore;
  readonly intakeCommits: GroupCommit;
  readonly attemptCommits: GroupCommit;
  /** Intake's stored bytes, counted up in memory per transaction and written once per client before its COMMIT. */
  private readonly storedBytes: ReturnType<typeof storedBytesTally>;
  /** A lease-guarded state change inside `tx` (the areas' shared step). */
  readonly transition = (
    tx: DbOrTx,
    task: TaskRow,
    patch: Partial<NewTaskRow>,
    opts: TransitionOptions,
    current = false,
  ) => this.transitionIn(tx, task.id, patch, opts, current ? task : undefined);

  constructor(
    readonly database: Database_,
    readonly rules: TransitionRules,
  ) {
    const db = database.db;
    // Creations arrive from many connections at once: a commit waits up to 2 turns for more (group-commit.ts).
    // Both flush within the turn's one clock for background work (next-turn.ts), which the upstream
    // calls share: together they run about TURN_WORK_MS of a turn, not 10 ms each.
    const turn = turnTime;
    // A file's WAL is synced off the event loop, one sync for both commits (wal-sync.ts).
    const { sqlite } = database;
    const walSync = sqlite.memory || sqlite.name.startsWith("file:") ? undefined : new WalSync(`${sqlite.name}-wal`);
    this.intakeCommits = new GroupCommit(db, 256, INTAKE_FILL_TURNS, 0, { shared: turn, walSync });
    // Attempts' records: a commit waits up to RECORD_HOLD_MS for the records of attempts on the wire,
    // RECORD_LINGER_MS while it holds records only.
    this.attemptCommits = new GroupCommit(db, 256, 0, RECORD_HOLD_MS, {
      shared: turn,
      walSync,
      lingerMs: RECORD_LINGER_MS,
    });
    this.storedBytes = storedBytesTally(db);

    this.tasks = sqliteTasks(this);

    this.events = sqliteEvents(this);

    this.clients = sqliteClients(this);

    this.accounts = sqliteAccounts(this);

    this.keyHealth = sqliteKeyHealth(this);

    this.webhookEndpoints = sqliteWebhookEndpoints(this);

    this.notices = sqliteNotices(this);

    this.sessions = sqliteSessions(this);

    this.limits = sqliteRateLimits(this);

    this.ops = sqliteOps(this);

    this.outputs = sqliteOutputs(this);
  }

  async close(): Promise<void> {
    this.intakeCommits.close();
    this.attemptCommits.close();
    // The checkpointer's connection closes first: the last connection to close checkpoints the WAL.
    await this.database.checkpointer?.stop();
    this.database.close();
  }

  transitionIn(
    _tx: DbOrTx,
    id: string,
    patch: Partial<NewTaskRow>,
    opts: TransitionOptions,
    current?: TaskRow,
  ): TaskRow | undefined {
    // One connection: the database's prepared statements run inside the transaction `_tx` has open.
    return transitionIn(this.database.db, this.rules, id, patch, opts, current);
  }

  submissionContext(tx: DbOrTx, task: TaskRow): SubmissionContext {
    // The database's prepared statements, inside the transaction `tx` has open (one connection).
    const db = this.database.db;
    const position = creditPosition(db, task.clientId);
    const learnedPrice = task.priceKey ? findLearnedPrice(db, task.priceKey) : null;
    const needsAround =
      position !== undefined && position.limit !== null && !position.revoked && task.submitAttempts === 0;
    return {
      task,
      position,
      learnedPrice,
      reservations: needsAround ? reservationsAround(tx, task.clientId, task.id) : NO_RESERVATIONS,
    };
  }

  /**
   * Intake, in the group commit's transaction: the caller's idempotency, the caps and the budget
   * (which throw before anything is written), the insert. Atomic by itself: a reservation's two
   * writes get their own savepoint, a plain creation is one statement. The client's stored bytes
   * are the transaction's tally (StoredBytesTally), added to only once the unit's writes are done
   * and written once per client before COMMIT.
   */
  createIn(db: Db, tx: DbOrTx, req: NewTaskRequest): CreateResult {
    const { row } = req;
    // Prepared statements run on the one connection, inside the transaction `tx` has open.
    const existing = findTaskByIdempotencyKeyPrepared(db, row.clientId, row.idempotencyKey);
    if (existing) return { task: existing, replayed: true };
    const storedBytes = this.intakeCommits.gathered(this.storedBytes);
    const reserved = req.admit({
      waiting: req.needs.waiting ? countByPhaseForClient(tx, row.clientId, "waiting") : 0,
      position: req.needs.credit ? creditPosition(db, row.clientId) : undefined,
      learnedPrice: req.needs.credit && row.priceKey ? findLearnedPrice(db, row.priceKey) : null,
      storedBytes: req.storedBytesLimit != null ? storedBytes.of(row.clientId) : undefined,
    });
    if (reserved === 0) {
      // Still atomic without a savepoint: the insert is the one statement, and it can refuse a value
      // (then nothing was written and nothing counted).
      const task = insertTaskPrepared(db, row, 0);
      storedBytes.add(row.clientId, task.storedBytes);
      return { task, replayed: false };
    }
    const task = tx.transaction(() => {
      const task = insertTaskPrepared(db, row, reserved);
      applyCreditChange(db, row.clientId, row.id, { charged: 0, refunded: 0, reserved }, row.createdAt);
      return task;
    });
    storedBytes.add(row.clientId, task.storedBytes);
    return { task, replayed: false };
  }
}
