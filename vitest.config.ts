import { configDefaults, defineConfig } from "vitest/config";
import LongestFirst from "./test/setup/sequencer.js";

/**
 * Unit tests (pure code, no database server) run without PostgreSQL; integration and end-to-end
 * tests share one embedded PostgreSQL per project (test/setup/postgres.ts), started only when one of
 * them runs. `npm test` runs them all; `npx vitest run --project unit` runs the unit tests alone,
 * `--project 'integration*'` the integration and end-to-end tests.
 *
 * Two workers by default (GENRELAY_TEST_WORKERS, 1 for the old layout): two integration files run at
 * once, in two processes, and the files in TIMED move to a project of their own,
 * `integration-timed`, which runs alone, one file at a time, after the others
 * (`sequence.groupOrder`): they assert a wall-clock bound (a victim's latency, a takeover within its
 * lease, a deadline held) or are known to be sensitive to load. A new file that bounds a duration in
 * real time goes in TIMED. docs/testing.md, "Time", has both layouts' figures.
 *
 * test/setup/exit-guard.ts keeps a failed run's exit status non-zero. GENRELAY_GATE_FIXTURES=1 is
 * for test/e2e/gate.test.ts only: each project then runs the deliberately failing fixtures under
 * test/gate-fixtures/ instead of the suite, with a dependency-like hook that calls process.exit(0).
 */
const gate = process.env.GENRELAY_GATE_FIXTURES === "1";
const workers = gate ? 1 : Math.max(1, Number(process.env.GENRELAY_TEST_WORKERS) || 2);

const TIMED = [
  "test/integration/delivery-tenants.test.ts",
  "test/integration/mirror-deadlines.test.ts",
  "test/integration/noisy-neighbours.test.ts",
  "test/integration/pg-leader-planning.test.ts",
  "test/integration/pg-leadership.test.ts",
  "test/integration/pg-outage.test.ts",
  "test/integration/pg-streams.test.ts",
  "test/integration/poll-latency.test.ts",
  "test/integration/prefer-wait.test.ts",
  "test/integration/public-flood.test.ts",
  "test/integration/receiver-protection.test.ts",
  "test/integration/store-conformance-claim-fair.test.ts",
  "test/integration/store-conformance-claim-of-keys.test.ts",
  "test/integration/upstream-client.test.ts",
  "test/integration/upstream-deadlines.test.ts",
  "test/integration/webhook-sender.test.ts",
  "test/integration/workers-deliver.test.ts",
  "test/e2e/lazy-modules.test.ts",
  "test/e2e/pg-frozen-leader.test.ts",
];

/** What the two integration projects share: the run's servers, and one process for all their files. */
const integration = {
  globalSetup: gate
    ? ["test/setup/postgres.ts", "test/gate-fixtures/exit-zero-hook.ts"]
    : ["test/setup/postgres.ts", "test/setup/rabbitmq.ts"],
  // One process and one module graph for all the files of a worker, as for the unit tests: a fork and a
  // fresh import of the sources cost about 1 s of CPU per file, more than most files' tests. What a file
  // changes outside its modules (fetch globals, process.env, timers) test/setup/shared-process.ts
  // puts back when it ends; a test that installs something process-wide in the sources puts it back.
  isolate: false,
  setupFiles: ["test/setup/shared-process.ts"],
};

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
    // The longest integration files first within their project (test/setup/sequencer.ts).
    sequence: { sequencer: LongestFirst },
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
          ...integration,
          name: "integration",
          include: gate
            ? ["test/gate-fixtures/integration/*.ts"]
            : ["test/integration/**/*.test.ts", "test/e2e/**/*.test.ts"],
          ...(workers > 1
            ? { exclude: [...configDefaults.exclude, ...TIMED], maxWorkers: workers, sequence: { groupOrder: 1 } }
            : {}),
        },
      },
      ...(workers === 1
        ? []
        : [
            {
              extends: true as const,
              test: {
                ...integration,
                name: "integration-timed",
                include: TIMED,
                maxWorkers: 1,
                sequence: { groupOrder: 2 },
              },
            },
          ]),
    ],
  },
});
