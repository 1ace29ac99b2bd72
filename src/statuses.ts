/**
 * The task states genrelay shares with the upstream (a leaf module: the schema, the upstream client
 * and the core all use it, and it imports nothing).
 */
export const TASK_STATUSES = ["queued", "processing", "succeeded", "failed", "canceled"] as const;
export type TaskStatus = (typeof TASK_STATUSES)[number];

/**
 * Where a task is in the relay: waiting to be submitted, submitted and watched, its output being
 * copied into the client's bucket (succeeded upstream, task.succeeded not yet written), or done.
 */
export const TASK_PHASES = ["waiting", "submitted", "mirroring", "done"] as const;
export type TaskPhase = (typeof TASK_PHASES)[number];

/**
 * Where an event's webhook stands: none (no callback_url), pending, succeeded or failed; ended: its
 * endpoint was deleted while it was pending, so it is never attempted again.
 */
export const DELIVERY_STATUSES = ["none", "pending", "succeeded", "failed", "ended"] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];
