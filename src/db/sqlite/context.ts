import type { CreateResult, NewTaskRequest, SubmissionContext, TransitionOptions } from "../../store/store.js";
import type { NewTaskRow, TaskRow } from "../../store/rows.js";
import type { GroupCommit } from "./group-commit.js";
import type { Database_, Db } from "./open.js";
import type { DbOrTx } from "./tx.js";

/**
 * What the SQLite area files (tasks.ts, events.ts, ...) use of their store: the database, its two
 * group commits and the steps several areas share. SqliteStore (store.ts) implements it; the area
 * files import this leaf, not the store, so the store ↔ area-file imports run one way.
 */
export interface SqliteContext {
  readonly database: Database_;
  /** Creations and the read budget's takes, one fsync per batch. */
  readonly intakeCommits: GroupCommit;
  /** Transitions, submissions, claims and attempt records, one fsync per batch. */
  readonly attemptCommits: GroupCommit;
  /**
   * A lease-guarded state change inside `tx` (the areas' shared step). `current`: `task` was read in
   * this same transaction (the row as stored), so the change starts from it instead of reading it again.
   */
  readonly transition: (
    tx: DbOrTx,
    task: TaskRow,
    patch: Partial<NewTaskRow>,
    opts: TransitionOptions,
    current?: boolean,
  ) => TaskRow | undefined;
  submissionContext(tx: DbOrTx, task: TaskRow): SubmissionContext;
  createIn(db: Db, tx: DbOrTx, req: NewTaskRequest): CreateResult;
}
