import type { TaskPhase, TaskStatus } from "../statuses.js";
import type { ClientRoom } from "./fairness.js";
import type { HeldPieces } from "../upstream/json-text.js";
import type {
  AttemptRow,
  ClientRow,
  KeyHealthRow,
  ClaimedEvent,
  EventRow,
  HourlyCount,
  NewAttemptRow,
  NewClientRow,
  NewEventRow,
  NewNoticeRow,
  NewSessionRow,
  NoticeRow,
  NewTaskRow,
  SessionRow,
  TaskRow,
  UpstreamAccountRow,
  NewWebhookEndpointRow,
  WebhookEndpointRow,
} from "./rows.js";

/**
 * Everything the relay keeps, as domain-level atomic operations. Every method is one atomic unit
 * (one transaction where it writes more than one row) and returns a promise, so the same callers run
 * on SQLite (better-sqlite3: the transactions stay synchronous inside SqliteStore, which is what
 * keeps them short) and on PostgreSQL (PgStore, with its own transactions). No caller holds a
 * transaction open across an await: decisions that must see the state they change (the credit
 * budget, a lease) are passed in as pure functions and run inside the operation.
 *
 * Values (one rule on both drivers, applied where values are bound: src/store/values.ts, read per
 * placeholder by src/db/kit/bound-values.ts; a refusal is a StoreValueError, code "invalid_value",
 * which the API answers 400 invalid_request):
 * - text to write: NUL is refused; lone surrogates are stored as U+FFFD (and read back so); a
 *   column of an index takes at most MAX_KEY_BYTES (2,048) bytes of UTF-8;
 * - text compared with stored text (ids, keys, tokens, cursors, prefixes): NUL matches nothing. A
 *   single value holding NUL is bound as NULL (so `<>` and `<` match nothing either); an element of
 *   a list is left out of it (an exclusion list with it excludes nothing more). A count or max
 *   still answers its one row;
 * - numbers, written or compared: whole numbers within ±(2**53 - 1) only (every numeric column is a
 *   64-bit integer); 0.5, 1e308, NaN and 2**53 are refused. A limit below 0 reads no rows;
 * - JSON columns keep numbers as they are: NaN or Infinity in duration samples is refused;
 * - an empty patch changes nothing and answers the row (while the lease holds, for leased writes);
 * - releaseLeases matches its prefix as plain characters (no wildcards, case kept, any length);
 * - close may be called twice.
 */
export interface Store {
  readonly dialect: "sqlite" | "postgres";
  readonly tasks: TaskStore;
  readonly events: EventStore;
  readonly clients: ClientStore;
  readonly accounts: AccountStore;
  readonly sessions: SessionStore;
  readonly keyHealth: KeyHealthStore;
  /** The client's subscribed URLs (webhook_endpoints), not the delivery keys' health (`keyHealth`). */
  readonly webhookEndpoints: WebhookEndpointStore;
  readonly notices: NoticeStore;
  readonly limits: RateLimitStore;
  readonly ops: OpsStore;
  /** Long task outputs kept out of the task row, in pieces (core/stored-output.ts). */
  readonly outputs: OutputStore;
  close(): Promise<void>;
}

/**
 * A long output in pieces outside the task row (issue #38 item 7): written piece by piece, each
 * piece one short write of its own (on SQLite one unit of the group commit), before the transition
 * that puts the ref on the task; read piece by piece. So no single step on the event loop handles
 * the whole text, and the task row the workers read stays small. A ref no task holds (its writer
 * died before its transition, or the transition lost its lease) is swept once it is old.
 */
export interface OutputStore {
  /**
   * Writes `pieces` in order under `ref`, a new id (the last one marked). Pieces still held by the
   * parse worker are fetched one at a time (on SQLite as UTF-8 bytes moved from it).
   */
  write(ref: string, pieces: readonly string[] | HeldPieces, now: number): Promise<void>;
  /** The pieces of `ref`, in order, each read on its own; throws OutputMissingError if any is missing. */
  pieces(ref: string): AsyncIterable<string>;
  /**
   * The same pieces as UTF-8 bytes, as an answer sends them (http/json-answer.ts). On SQLite each
   * is read as a blob, never a string on the V8 heap: a 7 MB output read as text made 7 MB of young
   * strings per read, two or three scavenges each, and its encoding again (issue #38 item 7).
   */
  bytes(ref: string): AsyncIterable<Uint8Array>;
  /** Deletes the pieces of refs no task holds, written before `before`; at most `batch` refs. Answers how many refs. */
  sweep(before: number, batch: number): Promise<number>;
}

/** A stored output that is not (or no longer) whole: pruned while read, or never finished. */
export class OutputMissingError extends Error {
  override readonly name = "OutputMissingError";
  constructor(ref: string, seq: number) {
    super(`output ${ref} has no piece ${seq}`);
  }
}

/** A client's credit position: the ledger's totals, what its open tasks hold, and its limit. */
export interface CreditPosition {
  charged: number;
  refunded: number;
  reserved: number;
  limit: number | null;
  revoked: boolean;
}

/** The client's reservations seen from one of its waiting tasks (which is left out of every sum). */
export interface ReservationsAround {
  /** Held by tasks offered upstream (submitted, or an attempt counted): they come back or turn into charges. */
  inFlight: number;
  /** Held by waiting tasks created before this one: they go first. */
  ahead: number;
  /** Held by every other open task of the client. */
  others: number;
}

export interface LedgerEntry {
  taskId: string;
  charged: number;
  refunded: number;
  at: number;
}

/** What intake's decision sees, read inside the creation's transaction. */
export interface IntakeContext {
  /** The client's waiting tasks (counted only when the client has a max_waiting). */
  waiting: number;
  /** The client's credit position (read only when the client has a credit limit). */
  position: CreditPosition | undefined;
  /** The learned price of the task's price key, if any. */
  learnedPrice: number | null;
  /** The client's stored bytes before this task (its tasks' stored_bytes summed), read only when the request has a storedBytesLimit. */
  storedBytes?: number | undefined;
}

export interface NewTaskRequest {
  /** The row to insert; `pointsReserved` is filled in from `admit`. */
  row: NewTaskRow & { id: string; clientId: string; idempotencyKey: string; requestHash: string; priceKey: string };
  /** Whether the decision needs the waiting count and the credit position (reads skipped otherwise). */
  needs: { waiting: boolean; credit: boolean };
  /** Decides in the transaction: returns the points to reserve, or throws (the creation is rolled back alone). */
  admit: (ctx: IntakeContext) => number;
  /**
   * The most the client's tasks may store (bytes, their stored_bytes summed), or absent: no bound.
   * With one, admit sees the client's stored bytes, read where concurrent creations of the client
   * cannot both see room for themselves. Whatever the bound, a created task's storedBytes is added
   * to its client's, and a pruned one's taken off.
   */
  storedBytesLimit?: number | null | undefined;
}

export interface CreateResult {
  task: TaskRow;
  replayed: boolean;
}

/** A change of a task's charge, refund and reservation, for its client's books. */
export interface CreditChange {
  charged: number;
  refunded: number;
  reserved: number;
}

/**
 * The rules of a state change, owned by the core (src/core/transition.ts) and handed to the store
 * when it is made: the store applies them inside its transaction, so every dialect keeps the same books.
 */
export interface TransitionRules {
  /** The patch as applied to `before` (the reservation ends once the charge is known or the task is done). */
  prepare(before: TaskRow, patch: Partial<NewTaskRow>): Partial<NewTaskRow>;
  /** The change to the client's books, whether to learn a price, and whether waiting tasks may go again. */
  settle(
    before: TaskRow,
    after: TaskRow,
  ): { change: CreditChange; learn: { priceKey: string; points: number } | null; wake: boolean };
  /** The outbox event the change calls for (its feed position is taken by the store), or null. */
  eventFor(
    before: TaskRow,
    after: TaskRow,
    now: number,
    firstAttemptDelayMs: number,
    expectedDurationMs?: number | null,
    /**
     * The event types the client's endpoints subscribe to (read by the store in the change's
     * transaction): an event of one of them is written even when the task's own callback_events
     * leave it out, its own row then `none` (the endpoints' rows carry it).
     */
    endpointEvents?: readonly string[],
  ): Omit<NewEventRow, "clientSeq"> | null;
}

/** What a lease-guarded state change needs besides the patch. */
export interface TransitionOptions {
  now: number;
  /** The caller's lease: the change applies only while it still holds (null: an operator's or API change). */
  token: string | null;
  /** Delay before the first delivery attempt of the event this change writes. */
  firstAttemptDelayMs: number;
  /**
   * The task's model's median duration when the caller knows it (core/eta.ts): the event of a task
   * that starts running then carries its `estimated_completion_at`.
   */
  expectedDurationMs?: number | null;
  /**
   * `task` is the row as the caller's lease (`token`) last claimed or wrote it, and the caller has
   * written nothing of it since: a store may start from it instead of reading the row again. Every
   * other writer of a leased row takes the lease over or releases it, which the guarded write sees
   * (the change then applies nowhere, as when the read shows the lease lost).
   */
  asLeased?: boolean;
}

/** What the submission decision sees, read inside the transaction that acts on it. */
export interface SubmissionContext {
  task: TaskRow;
  position: CreditPosition | undefined;
  learnedPrice: number | null;
  /** Read only when the client has a credit limit and the task was never offered upstream; zeros otherwise. */
  reservations: ReservationsAround;
}

/** The submission decision's outcome: a patch to apply, and whether it is a state change (with its event and credits). */
export type SubmissionStep<K extends string = string> = { kind: K; patch: Partial<NewTaskRow>; transition: boolean };

export interface ClaimOptions {
  now: number;
  leaseMs: number;
  token: string;
  limit: number;
  /**
   * A claim made as the leader of an upstream account carries that leadership's fence: on a store
   * shared by several processes it takes nothing once another process holds the account, or this
   * one's lease of it has lapsed (a process frozen past its lease, then resumed). SQLite has one
   * process, which always leads: there it is ignored.
   */
  fence?: LeaderFence | undefined;
}

/** One process's leadership of an upstream account: the fencing token goes up by one at every change of leader, never down. */
export interface LeaderFence {
  account: string;
  fence: number;
}

/** Who asks to lead (its lease owner id, the prefix of its claim tokens), and how long a lease lasts unrenewed. */
export interface LeaderLease {
  holder: string;
  leaseMs: number;
}

export interface InFlightTask {
  id: string;
  upstreamTaskId: string | null;
  status: TaskStatus;
  submittedAt: number | null;
  type: "image" | "video";
  model: string;
  /** The task's trace: a list read that reports it links it. */
  traceparent?: string | null;
  tracestate?: string | null;
}

export interface TaskListQuery {
  clientId: string;
  limit: number;
  /** Exclusive upper bound: ids are time-ordered, so "older than this id" pages newest first. */
  beforeId?: string | undefined;
  type?: "image" | "video" | undefined;
  status?: TaskStatus | undefined;
  /** A relay or upstream task id, or a metadata value (the dashboard's search). */
  search?: string | undefined;
  /** Only tasks whose last event is failed, or pending again after an attempt that got no 2xx. */
  deliveryFailing?: boolean | undefined;
  /**
   * An output whose JSON is longer than this many bytes is not read from the database: the row
   * comes with outputJson null and outputOmitted true (a list read builds at most this much output per task).
   */
  outputMaxBytes?: number | undefined;
}

/** A task as a list reads it: with outputMaxBytes, a larger output is left in the database. */
export type ListedTask = TaskRow & { outputOmitted?: boolean };

export interface SupportTaskQuery {
  clientId?: string | undefined;
  status?: TaskStatus | undefined;
  limit: number;
}

export interface TaskStore {
  /** Intake: the caller's idempotency, the client's caps and credit budget, and the insert, atomically. */
  create(req: NewTaskRequest): Promise<CreateResult>;
  /**
   * The one state change: the patch (only while `token` holds), the credit books (reservation ended
   * once charged or done, ledger, learned price, waiting tasks woken when room comes back) and the
   * outbox event the new status calls for, in one transaction. Undefined when the task is gone or
   * the lease no longer holds.
   */
  transition(task: TaskRow, patch: Partial<NewTaskRow>, opts: TransitionOptions): Promise<TaskRow | undefined>;
  /** A patch with no state change (rescheduling, counters, lease release), only while `token` holds. */
  reschedule(id: string, token: string, patch: Partial<NewTaskRow>): Promise<TaskRow | undefined>;
  /** Reads the submission context, asks `decide`, and applies its step, in one transaction; null when the lease is lost. */
  beginSubmission<K extends string>(
    id: string,
    token: string,
    decide: (ctx: SubmissionContext) => SubmissionStep<K>,
    opts: TransitionOptions,
  ): Promise<{ kind: K; task: TaskRow } | null>;
  /** Reads the task and applies `decide`'s patch as a transition, in one transaction (cancel: the rules need the current row). */
  decideAndTransition(
    id: string,
    clientId: string | null,
    decide: (task: TaskRow) => Partial<NewTaskRow> | null,
    opts: TransitionOptions,
  ): Promise<{ before: TaskRow; after: TaskRow } | null>;

  find(id: string): Promise<TaskRow | undefined>;
  /** What a file link reads of its task (GET /files/{token}): its client and its copies, not the rest of the row. */
  filesOf(id: string): Promise<TaskFiles | undefined>;
  /** A client's task, or undefined for an unknown id or another client's task (the two must look the same). */
  findOfClient(clientId: string, id: string): Promise<TaskRow | undefined>;
  /** Tasks whose relay id or upstream id is `id` (the operator's lookup). */
  findByAnyId(id: string): Promise<TaskRow[]>;
  /** The task an upstream id is bound to on an account (one probe of the unique index; the submitter asks per submission). */
  findByUpstreamId(account: string, upstreamTaskId: string): Promise<TaskRow | undefined>;
  list(q: TaskListQuery): Promise<ListedTask[]>;
  /** The client's stored bytes: its tasks' stored_bytes summed (kept by intake and retention, read from one row). */
  storedBytesOfClient(clientId: string): Promise<number>;
  listForSupport(q: SupportTaskQuery): Promise<TaskRow[]>;
  /** Waiting tasks of the account created before this one: its queue position - 1. */
  waitingAhead(account: string, id: string): Promise<number>;
  /** A client's waiting tasks never offered upstream and not leased (revocation cancels them). */
  unsubmittedOfClient(clientId: string, now: number): Promise<TaskRow[]>;
  countsOfClient(clientId: string): Promise<Record<string, number>>;
  hourlyCounts(clientId: string, since: number): Promise<HourlyCount[]>;
  /**
   * waitingAhead of several tasks of one account in ONE query (a list page's waiting items): id ->
   * waiting tasks of the account before it. An id no longer waiting is absent.
   */
  waitingAheadOfEach(account: string, ids: readonly string[]): Promise<Map<string, number>>;
  recentCallbackUrls(clientId: string): Promise<string[]>;

  /** Round-robin across the account's clients (each client's oldest first, clients at their running cap skipped), claimed under a lease. */
  claimFairly(account: string, opts: ClaimOptions): Promise<TaskRow[]>;
  claimDue(phase: TaskPhase, account: string, opts: ClaimOptions): Promise<TaskRow[]>;
  /** Claims the given tasks of a phase, due or not, that no one else holds. */
  claimIds(ids: string[], phase: TaskPhase, opts: Omit<ClaimOptions, "limit">): Promise<TaskRow[]>;
  /** Waiting tasks past their expiry never offered upstream, due or not. */
  claimExpired(opts: ClaimOptions): Promise<TaskRow[]>;
  /**
   * Due, unleased tasks of a phase, round-robin across clients (every client's oldest before any
   * client's second; clients ranked by `rank`, lowest first, then by their oldest due task), claimed under a lease.
   * With `clientRoom`, each client takes no more than its room, asked before each pick with what
   * the claim took so far (its share of the worker's pool).
   */
  claimAcrossClients(
    phase: TaskPhase,
    opts: ClaimOptions & { rank: (clientId: string) => number; clientRoom?: ClientRoom },
  ): Promise<TaskRow[]>;
  /** Earliest next_run_at among unleased tasks of a phase, or a lease's expiry when sooner. */
  nextDueAt(phase: TaskPhase, now: number): Promise<number | null>;
  nextExpiryAt(): Promise<number | null>;
  accountsWithDue(phase: TaskPhase, now: number): Promise<string[]>;
  accountsInFlight(): Promise<string[]>;
  countRunning(account: string): Promise<number>;
  listInFlight(account: string): Promise<InFlightTask[]>;

  /** Removes finished tasks (with their events and attempts) older than `before`, one batch. */
  pruneFinished(before: number, batch: number): Promise<number>;
}

export interface EventClaimOptions extends ClaimOptions {
  /** Delivery keys (`client_id|host`) left alone: at their cap or with a breaker trial out. */
  excludeKeys: string[];
  /** At most this many events per delivery key in this claim (the rest of this process's cap and the breaker's allowance). */
  keyRoom: (key: string) => number;
  /**
   * The per-key cap across every process sharing the store: a store shared by several instances
   * counts the key's leased events and claims no more than the rest (SQLite: one process, keyRoom says it all).
   */
  maxPerKey: number;
  /** Clients left alone: at their fair share of the dispatcher's pool (each holds attempts in flight, so the list is bounded). */
  excludeClients?: string[];
  /** How many more events a client may take, asked before each pick with what the claim took so far (its fair share). */
  clientRoom?: ClientRoom;
}

/** A claim of notices within each client's share of the notifier's pool. */
export interface NoticeClaimOptions extends ClaimOptions {
  /** Clients left alone: at their share (each holds notices in flight, so the list is bounded). */
  excludeClients?: string[];
  /** How many more notices a client may take; without it, the oldest due notices whoever's they are. */
  clientRoom?: ClientRoom;
}

/** One delivery key: a client's callbacks to one `hostname:port`. */
export interface DeliveryKey {
  clientId: string;
  host: string;
}

/** A delivery key and how many of its due events one claim may take. */
export interface KeyLimit extends DeliveryKey {
  limit: number;
  /**
   * Leases ahead of the cap: how many of the key's events the claimer may hold leased at once
   * while no other claimer holds any (core/delivery-plan.ts, leaseRoom); within the cap otherwise.
   * Absent or at most the cap: no lease ahead. SQLite applies it; PostgreSQL claims within the cap.
   */
  leaseAhead?: number;
}

/** The records' commit window (EventStore.recordWindow; src/db/sqlite/group-commit.ts). */
export interface RecordWindow {
  /** A record is on its way: the open commit waits for it (a few ms at most). Call the result once it is queued. */
  expect(): () => void;
  /**
   * Runs `join` as the open commit closes, so what it queues shares that commit; false when none is
   * open. The commit then closes within a few ms, unless `linger`: what joins may wait for the
   * records' fuller commit (a refill of keys with leased-ahead events still to start).
   */
  beforeCommit(join: () => void, options?: { linger?: boolean }): boolean;
  /** What joined with `linger` can wait no longer: the open commit closes within a few ms. */
  hurry(): void;
}

export interface EventStore {
  /** Pending, due, unleased events, each task's in order, per-key room respected; claimed under a lease. */
  claimDue(opts: EventClaimOptions): Promise<ClaimedEvent[]>;
  nextDueAt(opts: { now: number; excludeKeys: string[]; excludeClients?: string[] }): Promise<number | null>;
  /**
   * The half-open trial of a paused key: one of its pending, unleased events, preferring one already
   * attempted (a receiver that fails every first attempt but takes retries is not dead), claimed under a lease.
   */
  claimTrial(key: DeliveryKey, opts: Omit<ClaimOptions, "limit">): Promise<ClaimedEvent | undefined>;
  /**
   * Up to `limit` of one key's due events, oldest due first, each task's in order (the refill of a
   * key whose attempt just settled: one indexed probe instead of a scan of every due event). A store
   * shared by several instances claims no more than `maxPerKey` less the key's leased events.
   */
  claimOfKey(key: DeliveryKey, opts: ClaimOptions & { maxPerKey: number }): Promise<ClaimedEvent[]>;
  /**
   * claimOfKey for several keys in one statement (the refills of every attempt settled in one
   * turn): each key's `limit` of its due events (core/delivery-plan.ts, refillPlan, decides the
   * limits), within `maxPerKey` less the key's leased events. Rows of different keys come back in
   * no particular order; each key's are in due order.
   */
  claimOfKeys(
    keys: readonly KeyLimit[],
    opts: Omit<ClaimOptions, "limit"> & {
      maxPerKey: number;
      /**
       * No one waits on the claim at once (its keys still have leased-ahead events to start): where
       * it shares the records' group commit (SQLite), it may wait for that commit's linger.
       */
      linger?: boolean;
    },
  ): Promise<ClaimedEvent[]>;
  /** The key's pending, unleased events made due now (retry-now); returns how many. */
  retryKeyNow(key: DeliveryKey, now: number): Promise<number>;
  /** How many of the key's events are pending. */
  pendingOfKey(key: DeliveryKey): Promise<number>;
  /**
   * True when a record queued before a claim in the same turn is written before it, in the same
   * transaction (SQLite's group commit): the dispatcher may hand an attempt's slot back, and ask for
   * its key's refill, as soon as the record is queued, so the refill's claim shares the records'
   * commit. Where it is not (PostgreSQL's records and claims run on separate connections), the slot
   * goes back once the record is durable, so no claim counts the settled event's lease.
   */
  readonly recordsBeforeClaims?: boolean;
  /**
   * Where records share a group commit (SQLite): attempts on the wire announce their records, so a
   * turn's commit waits a few ms for them and carries every record settled meanwhile, and the
   * refills' claim joins that commit as it closes (one transaction per turn, not one per settle).
   */
  readonly recordWindow?: RecordWindow;
  /** One attempt and the event's new state, only while `token` holds, lease released (group-committed where the store can). */
  recordAttempt(eventId: string, token: string, attempt: NewAttemptRow, patch: Partial<NewEventRow>): Promise<void>;
  /** A patch of a leased event, only while `token` holds, and its lease released. */
  release(eventId: string, token: string, patch: Partial<NewEventRow>): Promise<void>;
  /** The key's circuit opened: its pending events move to `until`. */
  postponeKey(clientId: string, host: string, until: number, now: number): Promise<number>;
  /** The task's last event queued again (same webhook-id and body); its in-flight attempt can no longer record over it. */
  requeueLastOfTask(taskId: string, round: Partial<NewEventRow>): Promise<EventRow | undefined>;
  /** A client's failed events created since `since` queued again (`round`: the core's new-round patch). */
  requeueFailed(clientId: string, since: number, round: Partial<NewEventRow>): Promise<number>;
  /** How many of the client's events are pending again after an attempt that got no 2xx (retrying; Recover leaves them alone). */
  retryingOfClient(clientId: string): Promise<number>;
  find(id: string): Promise<EventRow | undefined>;
  lastOfTask(taskId: string): Promise<EventRow | undefined>;
  lastOfTasks(taskIds: string[]): Promise<Map<string, EventRow>>;
  ofTask(taskId: string): Promise<EventRow[]>;
  attemptsOfTask(taskId: string): Promise<AttemptRow[]>;
  /**
   * How many attempts the attempt log holds for each of these events (absent: none). The feed's
   * counts come from here, not from the event row: an attempt whose lease was taken back (its
   * endpoint deleted, the event re-queued) is logged but can no longer update its row.
   */
  attemptCounts(eventIds: string[]): Promise<Map<string, number>>;
  /** The client's pull feed after a position, oldest first. */
  feed(clientId: string, afterPos: number, limit: number): Promise<EventRow[]>;
  /** The client's feed position of an old relay-wide cursor. */
  clientSeqAtOrBefore(clientId: string, seq: number): Promise<number>;
}

/**
 * The health of delivery keys across restarts and instances: when a key started answering no 2xx,
 * for the endpoint.failing / endpoint.recovered notices and the dashboard's banner.
 */
export interface KeyHealthStore {
  /** A failed attempt: opens the key's failing run unless one is open, and counts the attempt. */
  recordFailure(key: DeliveryKey, now: number, error: string | null): Promise<void>;
  /** A 2xx: ends the key's failing run. Returns the run that ended, or null when none was open. */
  recordSuccess(key: DeliveryKey, now: number): Promise<{ failingSince: number; noticeSentAt: number | null } | null>;
  /** Keys failing since `before` or earlier whose failing notice is not written yet, of clients with a notification_url, oldest first. */
  dueForNotice(before: number, limit: number): Promise<KeyHealthRow[]>;
  /** Marks the failing run that began at `failingSince` as noticed; false when another process did, or the run ended. */
  markNoticed(key: DeliveryKey, failingSince: number, at: number): Promise<boolean>;
  /** The client's keys answering no 2xx now, longest failing first. */
  failingOf(clientId: string): Promise<KeyHealthRow[]>;
}

/**
 * A client's endpoints: URLs subscribed to its events (POST /openapi/v1/webhooks/endpoints). Every
 * event a task change writes is also written once per endpoint of the client subscribed to its type
 * (in the same transaction: src/store/endpoint-fanout.ts), each row its own destination.
 */
export interface WebhookEndpointStore {
  /** Adds the endpoint unless the client has `max` already (then null), atomically. */
  create(row: NewWebhookEndpointRow, max: number): Promise<WebhookEndpointRow | null>;
  /** The client's endpoints, oldest first. */
  list(clientId: string): Promise<WebhookEndpointRow[]>;
  /** The client's endpoint, or undefined for an unknown id or another client's (the two look the same). */
  find(clientId: string, id: string): Promise<WebhookEndpointRow | undefined>;
  /**
   * Removes the client's endpoint and ends its pending and failed deliveries (`ended`: never claimed
   * nor recovered again; delivered ones and every attempt stay as history), in one transaction.
   * False: not the client's.
   */
  remove(clientId: string, id: string, now: number): Promise<boolean>;
  /** The endpoints' delivery rows of these tasks' events (endpoint_id set), in each task's order: the feed's per-destination view. */
  deliveriesOfTasks(taskIds: string[]): Promise<EventRow[]>;
  /** These endpoint delivery rows queued again (`round`: the core's new-round patch), unless ended; how many. */
  requeueDeliveries(ids: string[], round: Partial<NewEventRow>): Promise<number>;
}

/** Operational notices to a client's notification_url, with their own small outbox. */
export interface NoticeStore {
  insert(row: NewNoticeRow): Promise<void>;
  /** Pending, due, unleased notices, oldest first (clients in turns within their room), claimed under a lease. */
  claimDue(opts: NoticeClaimOptions): Promise<NoticeRow[]>;
  /** A leased notice's new state, only while `token` holds; the lease is released. */
  record(id: string, token: string, patch: Partial<NewNoticeRow>): Promise<void>;
  nextDueAt(now: number): Promise<number | null>;
  /** The client's notices, newest first. */
  ofClient(clientId: string, limit: number): Promise<NoticeRow[]>;
  /** Removes settled notices created before `before`, one batch; returns how many. */
  prune(before: number, batch: number): Promise<number>;
}

/** A task's client and its `files` (the copies of its output), as a file link reads them. */
export interface TaskFiles {
  clientId: string;
  filesJson: string | null;
}

export interface ClientStore {
  insert(row: NewClientRow): Promise<ClientRow>;
  find(id: string): Promise<ClientRow | undefined>;
  findByKeyHash(apiKeyHash: string): Promise<ClientRow | undefined>;
  list(): Promise<ClientRow[]>;
  update(id: string, patch: Partial<NewClientRow>): Promise<ClientRow | undefined>;
  /** Reads the client and applies `change`'s patch in one transaction (secret rotation). */
  updateWith<T>(
    id: string,
    change: (client: ClientRow) => { patch: Partial<NewClientRow>; result: T },
  ): Promise<{ client: ClientRow; result: T } | undefined>;
  markAdmitted(id: string, at: number): Promise<void>;
  /**
   * Calls `changed` after update/updateWith changed a client's row (its settings, limits, key's
   * revocation): at once for a change made through this store, and on PostgreSQL for one another
   * process made, while `ops.listen` runs (NOTIFY). `null`: any client may have changed (the
   * listener reconnected). Returns the function that stops the calls.
   */
  watch(changed: (clientId: string | null) => void): () => void;
  /**
   * Looks, synchronously and cheaply, for client changes no notification carries, and reports them
   * to the watchers as `null`: on SQLite another process's commit since the last look (the CLI
   * beside the server: `PRAGMA data_version`); a no-op on PostgreSQL, whose listener carries them.
   */
  pollChanges(): void;
  creditPosition(id: string): Promise<CreditPosition | undefined>;
  ledger(id: string): Promise<LedgerEntry[]>;
}

export interface AccountStore {
  state(account: string): Promise<UpstreamAccountRow | undefined>;
  updateState(
    account: string,
    patch: Partial<Omit<UpstreamAccountRow, "id" | "updatedAt">>,
    now: number,
  ): Promise<void>;
  /**
   * Takes one read of the account's budget if fewer than `limit` were taken in the `windowMs`
   * before `at`, and records it, atomically across every process sharing the store. False: none left.
   */
  takeRead(account: string, at: number, limit: number, windowMs: number): Promise<boolean>;
  readsSince(account: string, since: number): Promise<number[]>;
  pruneReads(account: string, before: number): Promise<void>;
  durationSamples(type: string, model: string): Promise<number[]>;
  saveDurationSamples(type: string, model: string, samples: number[], now: number): Promise<void>;
}

/** A rate limit's answer: counted, or refused until `retryAt` (when enough counted ones have left the window). */
export type RateLimitVerdict = { allowed: true } | { allowed: false; retryAt: number };

export interface RateLimitStore {
  /**
   * Counts one `action` of the client at `now` if fewer than `limit` were counted in the sliding
   * window of `windowMs` before it, atomically across every process sharing the store (N instances
   * allow what one does). A refusal is not counted. Counts older than the window are dropped here.
   */
  take(clientId: string, action: string, now: number, limit: number, windowMs: number): Promise<RateLimitVerdict>;
  /**
   * Gives back one `action` counted at `at` (a place held until now, such as a held wait's): it no
   * longer counts against the limit. A count no longer there (dropped with its window) is no-op.
   */
  give(clientId: string, action: string, at: number): Promise<void>;
  /**
   * Moves one `action` counted at `at` to `now` (a place still held: an open stream's heartbeat), so
   * it keeps counting for another window; one no longer there (its window passed) is counted anew.
   */
  renew(clientId: string, action: string, at: number, now: number): Promise<void>;
}

export interface SessionStore {
  /** Deletes ended sessions and inserts the new one. */
  open(row: NewSessionRow, now: number): Promise<void>;
  find(tokenHash: string): Promise<SessionRow | undefined>;
  touch(tokenHash: string, now: number): Promise<void>;
  revoke(tokenHash: string, now: number): Promise<void>;
}

export interface GaugeCounts {
  tasksByStatus: { status: string; n: number }[];
  tasksByAccountPhase: { account: string; phase: string; n: number }[];
  eventsByStatus: { status: string; n: number }[];
}

/** The worker loops a change concerns, for the other processes sharing the store. */
export type NudgeTarget = "submitter" | "poller" | "dispatcher";

/** Told of a task another process transitioned: its id, its client and its upstream account (event streams wake by each). */
export type TaskChanged = (taskId: string, clientId?: string, account?: string) => void;

export interface OpsStore {
  /**
   * Whether the process `as.holder` leads the upstream account (runs its submissions and polling):
   * its fence while it does, else null. One leader per account across the processes sharing the
   * store (SQLite: one process, always the leader). Checked before each tick. On PostgreSQL a lease
   * of `as.leaseMs` on the database's clock, renewed in the background: a process that stops making
   * progress (SIGSTOP, a stalled event loop, a dead network) loses it after that long, and another
   * takes it over with a higher fence, releasing the leases the previous holder's tokens still hold;
   * a process whose connection is gone (killed) loses it at once; close() gives it up.
   */
  leads(account: string, as: LeaderLease): Promise<LeaderFence | null>;
  /**
   * A store shared by several processes (PostgreSQL) only: every account's lease but the ones
   * `as.holder` holds, in one statement, each with whether it could take it now (lapsed, or its
   * holder's connection gone). Without it the store is one process's, which leads every account
   * (src/workers/leadership.ts, TakeoverScan).
   */
  leases?(as: LeaderLease): Promise<{ account: string; takeable: boolean }[]>;
  /**
   * Wakes this process's loops when another process writes what they act on, and tells `taskChanged`
   * of a task another process transitioned (requests held by Prefer: wait, event streams). A no-op on SQLite.
   * `resynced` is called each time the listening session is open again after it was lost: whatever
   * was notified in between was not heard, so every watcher reads its state once more.
   * `created`, with a submitter's nudge: it comes from creations of these accounts, none with a
   * deadline, so the submitter may let it pass for an account it found full (Nudges.created).
   */
  listen(
    nudge: (target: NudgeTarget, created?: readonly string[]) => void,
    taskChanged?: TaskChanged,
    resynced?: () => void,
  ): Promise<void>;
  /**
   * What a dead process left: on a single-process store every lease is released (no one else can
   * hold one); a shared store leaves leases to expire. Events from before destination_host get theirs.
   */
  recover(destinationHost: (url: string) => string): Promise<number>;
  /** Releases the leases this process holds (graceful shutdown). */
  releaseLeases(ownerPrefix: string): Promise<number>;
  /** A real write of a few KiB, rolled back: null when the database takes writes, else why not. */
  probeWrite(now: number): Promise<string | null>;
  gauges(): Promise<GaugeCounts>;
}
