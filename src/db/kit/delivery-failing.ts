/**
 * The dashboard's "delivery failing", as plain SQL that both dialects read, so it means the same
 * on SQLite and PostgreSQL.
 */

/**
 * An event whose delivery is retrying: pending again after an attempt that got no 2xx (a
 * redelivered event whose last answer was a 2xx is not).
 */
export const retryingEvent = (e: string) =>
  `(${e}.delivery_status = 'pending' AND ${e}.attempts > 0 AND (${e}.last_status_code IS NULL OR ${e}.last_status_code NOT BETWEEN 200 AND 299))`;

/**
 * A task (table `tasks`, unaliased) with a callback whose last event failed or is retrying. Its
 * last event is one probe of events_task_seq_idx per task, so the filter walks the client's tasks
 * newest first and stops at the page's limit.
 */
export const DELIVERY_FAILING_TASK = `(tasks.callback_url IS NOT NULL AND coalesce((SELECT CASE WHEN e.delivery_status = 'failed' OR ${retryingEvent("e")} THEN 1 ELSE 0 END FROM events e WHERE e.task_id = tasks.id ORDER BY e.sequence DESC LIMIT 1), 0) = 1)`;
