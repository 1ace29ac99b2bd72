import type pg from "pg";
import type {
  CreditPosition,
  LeaderFence,
  LeaderLease,
  NudgeTarget,
  TaskChanged,
  TransitionOptions,
} from "../../store/store.js";
import type { NewTaskRow, TaskRow } from "../../store/rows.js";
import type { Queryable, Row } from "./mapping.js";
import type { StoredBytesGrants } from "./stored-bytes-grants.js";

/** One delivery attempt waiting for the next group write (PgContext.flushAttempts). */
export interface PendingAttempt {
  eventId: string;
  token: string;
  attempt: Row;
  patch: Row;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/** A key's failed attempt whose health change waits for the turn's attempts' statement (PgContext.flushAttempts). */
export interface PendingFailure {
  clientId: string;
  host: string;
  now: number;
  error: string | null;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/**
 * What the PostgreSQL area files (tasks.ts, events.ts, ...) use of their store: the pool, its
 * transactions and the steps several areas share. PgStore (store.ts) implements it; the area files
 * import this leaf, not the store, so the store ↔ area-file imports run one way.
 */
export interface PgContext {
  readonly pool: pg.Pool;
  /** This instance's room under its clients' stored-bytes bounds (client_storage_grants, spent in memory). */
  readonly grants: StoredBytesGrants;
  /** One statement's rows, on the pool or inside a transaction's connection. */
  readonly q: (sql: string, values?: unknown[], on?: Queryable) => Promise<Row[]>;
  /** One statement's first row. */
  readonly one: (sql: string, values?: unknown[], on?: Queryable) => Promise<Row | undefined>;
  attempts: PendingAttempt[];
  /** Health changes of attempts queued in the same turn: written by the attempts' statement. */
  failures: PendingFailure[];
  flushAttempts(): Promise<void>;
  tx<R>(work: (c: pg.PoolClient) => Promise<R>): Promise<R>;
  transitionIn(
    c: pg.PoolClient,
    id: string,
    patch: Partial<NewTaskRow>,
    o: TransitionOptions,
    locked?: TaskRow,
  ): Promise<TaskRow | undefined>;
  updateLeased(c: Queryable, id: string, token: string, patch: Partial<NewTaskRow>): Promise<TaskRow | undefined>;
  updateLeasedEvent(c: Queryable, id: string, token: string, patch: Row): Promise<void>;
  claimTasks(
    where: string,
    extra: unknown[],
    o: { now: number; leaseMs: number; token: string; limit: number; fence?: LeaderFence | undefined },
    order?: string,
  ): Promise<TaskRow[]>;
  creditPositionIn(c: Queryable, clientId: string, lock: boolean): Promise<CreditPosition | undefined>;
  learnedPriceIn(c: Queryable, priceKey: string): Promise<number | null>;
  applyCredits(
    c: Queryable,
    clientId: string,
    taskId: string,
    change: { charged: number; refunded: number; reserved: number },
    at: number,
  ): Promise<void>;
  leads(account: string, as: LeaderLease): Promise<LeaderFence | null>;
  /** Every account's lease but `holder`'s, each with whether it could be taken now (OpsStore.leases). */
  leases(as: LeaderLease): Promise<{ account: string; takeable: boolean }[]>;
  /**
   * Wakes the submitter of the accounts of tasks just committed: this process's own when it leads
   * every one of them and listens (no NOTIFY, whose queue lock every committing instance takes),
   * else the leaders elsewhere through NOTIFY. `created`: the tasks are creations without a
   * deadline, a wake-up the submitter may let pass for an account it found full (submitterPayload).
   */
  wakeSubmitter(accounts: Iterable<string>, created?: boolean): Promise<void>;
  /** Whether wakeSubmitter of these accounts is a nudge of this process's own submitter (no NOTIFY). */
  submitterHere(accounts: Iterable<string>): boolean;
  listen(
    nudge: (target: NudgeTarget, created?: readonly string[]) => void,
    taskChanged?: TaskChanged,
    resynced?: () => void,
  ): Promise<void>;
}
