/**
 * The nice value of the relay's worker threads (the parse worker, the WAL checkpointer): below the
 * event loop's. On a busy machine a worker parsing a 7 MB answer and the event loop compete for the
 * same cores, and every turn the loop waits on a runqueue delays every request (issue #38 item 7):
 * background work yields the CPU to the thread that answers requests.
 */
export const BACKGROUND_NICE = 10;

/**
 * Source for the top of an eval'd worker's program (CommonJS): lowers the priority of the thread
 * running it, and of no other. On Linux a thread's id is a pid to setpriority(2), which then applies
 * to that thread alone; elsewhere (or where it is refused) the worker runs at the process's priority.
 */
export const LOWER_THREAD_PRIORITY = `
try {
  const tid = Number(require("node:fs").readlinkSync("/proc/thread-self").split("/").pop());
  require("node:os").setPriority(tid, ${BACKGROUND_NICE});
} catch {}
`;
