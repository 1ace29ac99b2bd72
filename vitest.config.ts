import { defineConfig } from "vitest/config";

/**
 * Two projects: unit tests (pure code, no database server) run without PostgreSQL; integration and
 * end-to-end tests share one embedded PostgreSQL per run (test/setup/postgres.ts), started only when
 * one of them runs. `npm test` runs both; `npx vitest run --project unit` runs the unit tests alone.
 *
 * test/setup/exit-guard.ts keeps a failed run's exit status non-zero. GENRELAY_GATE_FIXTURES=1 is
 * for test/e2e/gate.test.ts only: each project then runs the deliberately failing fixtures under
 * test/gate-fixtures/ instead of the suite, with a dependency-like hook that calls process.exit(0).
 */
const gate = process.env.GENRELAY_GATE_FIXTURES === "1";

export default defineConfig({
  test: {
    environment: "node",
    testTimeout: 20_000,
    hookTimeout: 30_000,
    pool: "forks",
    // The AWS SDK warns once per process that its 2027 releases will need Node 22: true, and noise
    // in every test process (and every relay a test starts) on this project's Node 20.
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true" },
    reporters: ["default", "./test/setup/exit-guard.ts"],
    projects: [
      {
        extends: true,
        test: {
          name: "unit",
          include: gate ? ["test/gate-fixtures/unit/*.ts"] : ["test/unit/**/*.test.ts"],
          // Pure code restores what it fakes (timers), so the unit files share one process and one
          // module graph: a fork and a fresh import of the sources per file cost more than the tests.
          isolate: false,
        },
      },
      {
        extends: true,
        test: {
          name: "integration",
          include: gate
            ? ["test/gate-fixtures/integration/*.ts"]
            : ["test/integration/**/*.test.ts", "test/e2e/**/*.test.ts"],
          globalSetup: gate
            ? ["test/setup/postgres.ts", "test/gate-fixtures/exit-zero-hook.ts"]
            : ["test/setup/postgres.ts", "test/setup/rabbitmq.ts"],
          // One process and one module graph for all the files, as for the unit tests: a fork and a fresh
          // import of the sources cost about 1 s of CPU per file, more than most files' tests. What a file
          // changes outside its modules (fetch globals, process.env, timers) test/setup/shared-process.ts
          // puts back when it ends; a test that installs something process-wide in the sources puts it back.
          isolate: false,
          setupFiles: ["test/setup/shared-process.ts"],
        },
      },
    ],
  },
});
