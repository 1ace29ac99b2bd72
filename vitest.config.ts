import { defineConfig } from "vitest/config";

/**
 * Two projects: unit tests (pure code, no database server) run without PostgreSQL; integration and
 * end-to-end tests share one embedded PostgreSQL per run (test/setup/postgres.ts), started only when
 * one of them runs. `npm test` runs both; `npx vitest run --project unit` runs the unit tests alone.
 */
export default defineConfig({
  test: {
    environment: "node",
    testTimeout: 20_000,
    hookTimeout: 30_000,
    pool: "forks",
    projects: [
      { extends: true, test: { name: "unit", include: ["test/unit/**/*.test.ts"] } },
      {
        extends: true,
        test: { name: "integration", include: ["test/integration/**/*.test.ts", "test/e2e/**/*.test.ts"], globalSetup: ["test/setup/postgres.ts"] },
      },
    ],
  },
});
