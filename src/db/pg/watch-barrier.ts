import { WATCH_PLACES } from "../../store/watch-places.js";
import type { Queryable } from "./mapping.js";

/**
 * NOTIFY only where someone listens, and never a wake-up lost (issue #43).
 *
 * A task's change is told to other instances (NOTIFY task:…, taken with the cluster-wide notify lock
 * at commit) only when a watcher may want it: its client holds a place for a held wait or an open
 * stream, or any client holds an open stream (a stream of a waiting task also watches its account's
 * queue). Places are rows of rate_limit_hits (task-wait.ts, streams.ts), taken before the watcher
 * reads what it waits on.
 *
 * The race: a transition decides "no one listens" in a snapshot taken before a new place commits,
 * and the new watcher reads the task before the transition commits; the watcher would then wait for
 * a wake that never comes. So a transition takes, before that decision, a shared advisory lock on its
 * client's key and on the streams' key (in the statement that locks its task row: TASK_FOR_CHANGE),
 * and a watcher, once its place has committed and before its first read, takes the exclusive lock
 * on its key for an instant (awaitChanges): it waits for every transition that may have decided
 * without seeing the place, so its read sees what they wrote. A transition whose decision starts after
 * the place committed sees the place and notifies. Transitions never wait on each other (shared locks).
 */
export const WATCH_LOCK_SPACE = 0x67_72_77; // "grw"
/** The key of open streams (any client's): a stream may watch its account's queue. */
const STREAMS_KEY = 0;

/** A task row ($1) locked for a change, with the transition's shared watch locks taken first. */
export const TASK_FOR_CHANGE = `SELECT t.* FROM tasks t
  CROSS JOIN LATERAL (SELECT pg_advisory_xact_lock_shared(${WATCH_LOCK_SPACE}, hashtext(t.client_id)),
                             pg_advisory_xact_lock_shared(${WATCH_LOCK_SPACE}, ${STREAMS_KEY})) w
  WHERE t.id = $1`;

/** A task row ($1) of client $2 locked for a change, as TASK_FOR_CHANGE. */
export const CLIENT_TASK_FOR_CHANGE = `${TASK_FOR_CHANGE} AND t.client_id = $2`;

/**
 * NOTIFY $1 with payload $2 when the task's client ($3) holds a watcher's place, or any client an
 * open stream; a statement after TASK_FOR_CHANGE's (so its snapshot is taken with the locks held).
 */
export const NOTIFY_IF_WATCHED = `SELECT pg_notify($1, $2) WHERE
  EXISTS (SELECT 1 FROM rate_limit_hits WHERE client_id = $3 AND action IN ('${WATCH_PLACES.hold}', '${WATCH_PLACES.stream}'))
  OR EXISTS (SELECT 1 FROM rate_limit_hits WHERE action = '${WATCH_PLACES.stream}')`;

/** After a watcher's place of `action` committed: waits for the transitions that may not have seen it. */
export async function awaitChanges(c: Queryable, clientId: string, action: string): Promise<void> {
  if (action === WATCH_PLACES.stream)
    await c.query(`SELECT pg_advisory_xact_lock(${WATCH_LOCK_SPACE}, ${STREAMS_KEY})`);
  else if (action === WATCH_PLACES.hold)
    await c.query(`SELECT pg_advisory_xact_lock(${WATCH_LOCK_SPACE}, hashtext($1))`, [clientId]);
}
