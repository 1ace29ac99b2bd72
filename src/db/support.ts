import { asc, eq } from "drizzle-orm";
import type { DbOrTx } from "./sqlite/tx.js";
import type { EventRow } from "../store/rows.js";
import { events } from "./sqlite/schema.js";

/** Every event of a task, in the task's order (the operator's `tasks show`). */
export function listTaskEvents(db: DbOrTx, taskId: string): EventRow[] {
  return db.select().from(events).where(eq(events.taskId, taskId)).orderBy(asc(events.sequence)).all();
}
