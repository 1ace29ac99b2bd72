/**
 * The places watchers hold in the store's rate limits (RateLimitStore), shared by every instance:
 * a request held by `Prefer: wait`, an open event stream. Their action names are also how the
 * PostgreSQL driver tells whether anyone may be waiting for a task's change (src/db/pg/watch-barrier.ts).
 */
export const WATCH_PLACES = { hold: "held_wait", stream: "open_stream" } as const;
