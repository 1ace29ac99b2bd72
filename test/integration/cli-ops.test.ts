import Database from "better-sqlite3";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { systemClock } from "../../src/clock.js";
import { hashApiKey } from "../../src/crypto.js";
import {
  insertAttempt,
  insert as insertEvent,
  lastOfTask as lastEventOfTask,
  update as updateEvent,
} from "../../src/db/sqlite/events.js";
import { openDatabase, type Database_ } from "../../src/db/sqlite/open.js";
import { find as findTask, insertTask } from "../../src/db/sqlite/tasks.js";
import { newId } from "../../src/ids.js";
import { CLI_PATH, runCliInProcess, type CliRun } from "../helpers/cli.js";
import { createTestRelay, imageBody, type TestRelay, insertTestClient, transitionTask } from "../helpers/relay.js";

let dir: string;
let dbPath: string;
const cleanups: (() => unknown)[] = [];

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "genrelay-cli-ops-"));
  dbPath = join(dir, "relay.db");
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  rmSync(dir, { recursive: true, force: true });
});

const cliEnv = (env: Record<string, string>) => ({ PATH: process.env.PATH ?? "", DATABASE_PATH: dbPath, ...env });

/** The CLI in-process (runCli), with a clean environment: only PATH, the database and what a test passes. */
function cli(args: string[], env: Record<string, string> = {}): Promise<CliRun> {
  return runCliInProcess(args, cliEnv(env));
}

/**
 * The built CLI as a child process, which leaves this process's event loop free (for concurrent
 * writes): the real-process smoke test of this file.
 */
function cliAsync(args: string[]): Promise<CliRun> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, [CLI_PATH, ...args], { env: cliEnv({}) });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (b: Buffer) => (stdout += b.toString("utf8")));
    child.stderr.on("data", (b: Buffer) => (stderr += b.toString("utf8")));
    child.on("error", fail);
    child.on("close", (status) => done({ status, stdout, stderr }));
  });
}

function open(): Database_ {
  const database = openDatabase(dbPath);
  cleanups.push(() => database.close());
  return database;
}

/** A task and its first event in one transaction, as the relay writes them. */
function insertTaskWithEvent(database: Database_, clientId: string, padding: string): void {
  const now = Date.now();
  const id = newId("task", now);
  database.db.transaction((tx) => {
    insertTask(tx, {
      id,
      clientId,
      type: "image",
      model: "p-image",
      status: "processing",
      phase: "submitted",
      requestJson: JSON.stringify({ model: "p-image", mode: "generate", prompt: padding, count: 1 }),
      callbackUrl: "https://example.com/hook",
      callbackEvents: JSON.stringify(["task.processing"]),
      idempotencyKey: `key-${id}`,
      requestHash: id,
      upstreamAccount: "default",
      upstreamIdempotencyKey: `genrelay-${id}`,
      eventSequence: 1,
      createdAt: now,
      updatedAt: now,
    });
    insertEvent(tx, {
      id: newId("evt", now),
      clientId,
      taskId: id,
      type: "task.processing",
      sequence: 1,
      payload: JSON.stringify({ type: "task.processing", data: { id, prompt: padding } }),
      callbackUrl: "https://example.com/hook",
      deliveryStatus: "pending",
      nextAttemptAt: now,
      createdAt: now,
    });
  });
}

const count = (database: Database.Database, table: string) =>
  (database.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;

describe("db backup", () => {
  // About 3 s of CPU (the inserts below, a CLI process's start, the copy and its checks): past the
  // suite's 20 s at load 15 and more on two cores.
  it("copies the database consistently while another connection keeps writing", { timeout: 60_000 }, async () => {
    const database = open();
    const { client } = insertTestClient(database.db, systemClock, { name: "writer" });
    const padding = "x".repeat(6000);
    // Enough pages (about 20 MB) that copying takes a while: 1,000 tasks of 12 KB rather than 4,000 of
    // 3 KB, the same bytes for a quarter of the inserts' CPU (6.6 → 2.0 s, 41 → 10 s wall at load 14).
    database.db.transaction(() => {
      for (let i = 0; i < 1000; i++) insertTaskWithEvent(database, client.id, padding);
    });

    let stop = false;
    let batches = 0;
    const writer = new Promise<void>((done, fail) => {
      const step = () => {
        if (stop) return done();
        try {
          for (let i = 0; i < 10; i++) insertTaskWithEvent(database, client.id, padding);
          batches++;
        } catch (err) {
          return fail(err as Error);
        }
        setImmediate(step);
      };
      setImmediate(step);
    });

    const folder = join(dir, "backups");
    mkdirSync(folder);
    const copyPath = join(folder, "copy.db");
    const before = count(database.sqlite, "tasks");
    const run = await cliAsync(["db", "backup", copyPath, "--json"]);
    const batchesDuringBackup = batches;
    stop = true;
    await writer;
    const after = count(database.sqlite, "tasks");

    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
    // The writes really went on while the CLI ran.
    expect(batchesDuringBackup).toBeGreaterThan(0);
    expect(after).toBeGreaterThan(before);
    const reported = JSON.parse(run.stdout) as { path: string; bytes: number; pages: number; check: string };
    expect(reported).toMatchObject({ path: copyPath, check: "ok", bytes: statSync(copyPath).size });

    // Only the finished copy is left: no temporary file, journal or WAL beside it.
    expect(readdirSync(folder)).toEqual(["copy.db"]);

    const copy = new Database(copyPath, { readonly: true, fileMustExist: true });
    cleanups.push(() => copy.close());
    expect(copy.pragma("integrity_check", { simple: true })).toBe("ok");
    expect(copy.pragma("journal_mode", { simple: true })).toBe("delete");
    const tables = (db: Database.Database) =>
      (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as { name: string }[]).map(
        (r) => r.name,
      );
    expect(tables(copy)).toEqual(tables(database.sqlite));
    expect(tables(copy)).toEqual(
      expect.arrayContaining(["clients", "tasks", "events", "delivery_attempts", "upstream_reads"]),
    );
    // One moment's snapshot: somewhere between the start and the end of the run, and every task
    // with the event written in its transaction.
    const copied = count(copy, "tasks");
    expect(copied).toBeGreaterThanOrEqual(before);
    expect(copied).toBeLessThanOrEqual(after);
    expect(count(copy, "events")).toBe(copied);
    expect(count(copy, "clients")).toBe(1);

    // The copy is a working database: the relay opens (and migrates) it.
    const restored = openDatabase(copyPath);
    expect(count(restored.sqlite, "tasks")).toBe(copied);
    restored.close();
  });

  it("refuses to replace an existing file unless --force", async () => {
    open();
    const target = join(dir, "existing.db");
    writeFileSync(target, "not a backup");
    const refused = await cli(["db", "backup", target]);
    expect(refused.status).toBe(1);
    expect(refused.stdout).toBe("");
    expect(refused.stderr).toMatch(/^genrelay: .*existing\.db already exists \(use --force to replace it\)/);
    expect(statSync(target).size).toBe("not a backup".length);

    const forced = await cli(["db", "backup", target, "--force"]);
    expect(forced.stderr).toBe("");
    expect(forced.status).toBe(0);
    expect(forced.stdout).toMatch(/^backed up .* to .*existing\.db \(.*integrity ok/);
    const copy = new Database(target, { readonly: true });
    expect(copy.pragma("integrity_check", { simple: true })).toBe("ok");
    copy.close();
  });

  it("refuses to write over the live database, even with --force", async () => {
    open();
    const run = await cli(["db", "backup", dbPath, "--force"]);
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/is the live database itself/);
  });

  it.each([
    [["db", "backup"], 1, /db backup needs a FILE/],
    [["db", "backup", "a.db", "b.db"], 1, /unexpected argument "b\.db"/],
    [["db", "backup", "/no/such/folder/copy.db"], 1, /folder \/no\/such\/folder does not exist/],
    [["db", "backup", "x.db", "--bogus"], 1, /--bogus/],
    [["db", "explode"], 1, /unknown command: db explode/],
  ])("%j exits %i with a clear message", async (args, status, message) => {
    open();
    const run = await cli(args);
    expect(run.status).toBe(status);
    expect(run.stdout).toBe("");
    expect(run.stderr).toMatch(message);
    expect(run.stderr).not.toMatch(/\n\s+at /);
  });

  it("with no database at DATABASE_PATH, exits 2 and creates nothing", async () => {
    const run = await cli(["db", "backup", join(dir, "copy.db")]);
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/no database at .*relay\.db: set DATABASE_PATH/);
    expect(existsSync(dbPath)).toBe(false);
    expect(existsSync(join(dir, "copy.db"))).toBe(false);
  });
});

describe("db stats", () => {
  it("prints row counts, tasks by status, pending and failed deliveries and file sizes", async () => {
    const database = open();
    const { client } = insertTestClient(database.db, systemClock, { name: "stats" });
    for (let i = 0; i < 3; i++) insertTaskWithEvent(database, client.id, "p");
    const [first, second] = database.sqlite.prepare("SELECT id FROM events ORDER BY seq").all() as { id: string }[];
    updateEvent(database.db, first!.id, { deliveryStatus: "failed" });
    updateEvent(database.db, second!.id, { deliveryStatus: "succeeded" });

    const run = await cli(["db", "stats", "--json"]);
    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
    const stats = JSON.parse(run.stdout) as Record<string, any>;
    expect(stats.path).toBe(dbPath);
    expect(stats.tables).toMatchObject({ clients: 1, tasks: 3, events: 3, delivery_attempts: 0, upstream_reads: 0 });
    expect(stats.tasks_by_status).toEqual({ queued: 0, processing: 3, succeeded: 0, failed: 0, canceled: 0 });
    expect(stats.tasks_by_phase).toEqual({ waiting: 0, submitted: 3, mirroring: 0, done: 0 });
    expect(stats.deliveries).toMatchObject({
      pending: 1,
      failed: 1,
      succeeded: 1,
      none: 0,
      oldest_pending_at: expect.stringMatching(/^\d{4}-/),
    });
    expect(stats.files.database).toBe(statSync(dbPath).size);
    expect(stats.files.total).toBe(stats.files.database + stats.files.wal + stats.files.shm);
    expect(stats.pages.page_size).toBeGreaterThan(0);

    const human = await cli(["db", "stats"]);
    expect(human.status).toBe(0);
    expect(human.stdout).toContain(`database  ${dbPath}`);
    expect(human.stdout).toMatch(/^size +\d+(\.\d)? (B|KiB|MiB) \(file .*, WAL .*\)/m);
    expect(human.stdout).toMatch(/^ +tasks +3$/m);
    expect(human.stdout).toMatch(/^ +clients +1$/m);
    expect(human.stdout).toMatch(/^tasks by status +queued=0 +processing=3 +succeeded=0 +failed=0 +canceled=0$/m);
    expect(human.stdout).toMatch(/^deliveries +pending=1 +failed=1 /m);
  });

  it("with no database at DATABASE_PATH, exits 2", async () => {
    const run = await cli(["db", "stats"]);
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/^genrelay: no database at /);
  });
});

describe("tasks list and tasks show", () => {
  interface Created {
    id: string;
    api_key: string;
    webhook_secret: string;
  }
  let relay: TestRelay;
  let acme: Created;
  let rotatedSecret: string;

  /** Two clients from the CLI, a relay on the same database, and tasks through the API. */
  async function setup(): Promise<{ succeeded: string; waiting: string; other: string }> {
    const create = async (name: string) =>
      JSON.parse((await cli(["clients", "create", "--name", name, "--json"])).stdout) as Created;
    acme = await create("acme");
    const globex = await create("globex");
    // A rotation leaves a previous secret in the row as well: neither may ever be printed.
    rotatedSecret = (
      JSON.parse((await cli(["clients", "rotate-secret", acme.id, "--json"])).stdout) as { webhook_secret: string }
    ).webhook_secret;
    relay = createTestRelay({ DATABASE_PATH: dbPath });
    cleanups.push(() => relay.close());

    const post = async (apiKey: string, key: string, extra: Record<string, unknown>) => {
      const res = await relay.request(apiKey, "/openapi/v1/images/generations", {
        method: "POST",
        idempotencyKey: key,
        json: imageBody(extra),
      });
      expect(res.status).toBe(201);
      return ((await res.json()) as { data: { id: string } }).data.id;
    };
    const succeeded = await post(acme.api_key, "support-1", {
      callback_url: "https://example.com/hooks/acme",
      metadata: { order_id: "1234" },
    });
    const waiting = await post(acme.api_key, "support-2", {});
    const other = await post(globex.api_key, "support-3", {});

    const db = relay.database.db;
    const now = Date.now();
    const task = findTask(db, succeeded)!;
    const running = transitionTask(
      db,
      task,
      {
        status: "processing",
        phase: "submitted",
        upstreamTaskId: "up_7f3a9c",
        submittedAt: now,
        submitAttempts: 1,
        updatedAt: now,
      },
      { now },
    )!;
    transitionTask(
      db,
      running,
      {
        status: "succeeded",
        phase: "done",
        outputJson: JSON.stringify({ images: ["https://cdn.example/out.png"] }),
        pointsCharged: 12,
        pointsRefunded: 0,
        completedAt: now,
        updatedAt: now,
        nextRunAt: null,
      },
      { now },
    );
    const event = lastEventOfTask(db, succeeded)!;
    insertAttempt(db, {
      id: newId("att", now),
      eventId: event.id,
      taskId: succeeded,
      clientId: acme.id,
      eventType: event.type,
      url: "https://example.com/hooks/acme",
      attemptedAt: now,
      statusCode: 503,
      latencyMs: 87,
      outcome: "failed",
      error: "HTTP 503",
      responseBody: "try later",
    });
    updateEvent(db, event.id, {
      attempts: 1,
      lastAttemptAt: now,
      lastStatusCode: 503,
      lastError: "HTTP 503",
      nextAttemptAt: now + 5_000,
    });
    return { succeeded, waiting, other };
  }

  function expectNoSecrets(text: string): void {
    for (const secret of [acme.api_key, acme.webhook_secret, rotatedSecret, hashApiKey(acme.api_key)])
      expect(text).not.toContain(secret);
    expect(text).not.toMatch(/grk_[A-Za-z0-9_-]{20,}/);
    expect(text).not.toMatch(/whsec_/);
  }

  it("tasks show, by relay id and by upstream id, shows the task, its events and attempts, never a secret", async () => {
    const { succeeded } = await setup();
    for (const id of [succeeded, "up_7f3a9c"]) {
      const run = await cli(["tasks", "show", id]);
      expect(run.stderr).toBe("");
      expect(run.status).toBe(0);
      expect(run.stdout).toMatch(new RegExp(`^task +${succeeded}$`, "m"));
      expect(run.stdout).toMatch(new RegExp(`^client +${acme.id} \\(acme\\)$`, "m"));
      expect(run.stdout).toMatch(/^status +succeeded \(phase done\)$/m);
      expect(run.stdout).toMatch(/^upstream task +up_7f3a9c$/m);
      expect(run.stdout).toMatch(/^callback +https:\/\/example\.com\/hooks\/acme /m);
      expect(run.stdout).toMatch(/^metadata +\{"order_id":"1234"\}$/m);
      expect(run.stdout).toMatch(/^usage +charged 12, refunded 0$/m);
      expect(run.stdout).toContain("https://cdn.example/out.png");
      expect(run.stdout).toMatch(/^events \(1\)$/m);
      expect(run.stdout).toMatch(
        /^ +#1 evt_\S+ task\.succeeded +delivery pending, 1 attempt\(s\), last .* → 503, next attempt /m,
      );
      expect(run.stdout).toMatch(/^delivery attempts \(1\)$/m);
      expect(run.stdout).toMatch(/task\.succeeded failed 503 87 ms +https:\/\/example\.com\/hooks\/acme +HTTP 503$/m);
      expectNoSecrets(run.stdout);
    }

    const json = await cli(["tasks", "show", "up_7f3a9c", "--json"]);
    expect(json.status).toBe(0);
    expectNoSecrets(json.stdout);
    const shown = JSON.parse(json.stdout) as Record<string, any>;
    expect(shown).toMatchObject({
      id: succeeded,
      client_id: acme.id,
      client_name: "acme",
      status: "succeeded",
      phase: "done",
      upstream_task_id: "up_7f3a9c",
      upstream_idempotency_key: `genrelay-${succeeded}`,
      idempotency_key: "support-1",
      metadata: { order_id: "1234" },
      usage: { points_charged: 12, points_refunded: 0 },
      output: { images: ["https://cdn.example/out.png"] },
      callback: { url: "https://example.com/hooks/acme", events: ["task.succeeded", "task.failed", "task.canceled"] },
    });
    expect(shown.events).toEqual([
      expect.objectContaining({
        type: "task.succeeded",
        sequence: 1,
        delivery_status: "pending",
        attempts: 1,
        last_status_code: 503,
      }),
    ]);
    expect(shown.attempts).toEqual([
      expect.objectContaining({ outcome: "failed", status_code: 503, latency_ms: 87, error: "HTTP 503" }),
    ]);
    // Field by field, never the client row: nothing that looks like a key or secret.
    expect(JSON.stringify(Object.keys(shown))).not.toMatch(/secret|api_key|hash/);
  });

  it("tasks show of an unknown id exits 1; an upstream id shared across accounts asks for the relay id", async () => {
    const { waiting, other } = await setup();
    const missing = await cli(["tasks", "show", "task_nope"]);
    expect(missing.status).toBe(1);
    expect(missing.stdout).toBe("");
    expect(missing.stderr).toMatch(/^genrelay: no task task_nope \(neither a relay nor an upstream task id\)/);

    const db = relay.database.db;
    for (const id of [waiting, other])
      transitionTask(
        db,
        findTask(db, id)!,
        { upstreamTaskId: "up_shared", upstreamAccount: `acct-${id}` },
        { now: Date.now() },
      );
    const ambiguous = await cli(["tasks", "show", "up_shared"]);
    expect(ambiguous.status).toBe(1);
    expect(ambiguous.stderr).toContain("2 tasks have upstream id up_shared");
    expect(ambiguous.stderr).toContain(waiting);
    expect(ambiguous.stderr).toContain(other);
    expect((await cli(["tasks", "show"])).stderr).toMatch(/tasks show needs a task id/);
  });

  it("tasks list filters by client and status, newest first, and never shows a secret", async () => {
    const { succeeded, waiting, other } = await setup();
    const all = await cli(["tasks", "list", "--json"]);
    expect(all.status).toBe(0);
    expectNoSecrets(all.stdout);
    expect((JSON.parse(all.stdout) as { id: string }[]).map((t) => t.id)).toEqual([other, waiting, succeeded]);

    const mine = JSON.parse((await cli(["tasks", "list", "--client", acme.id, "--json"])).stdout) as Record<
      string,
      unknown
    >[];
    expect(mine.map((t) => t.id)).toEqual([waiting, succeeded]);
    expect(mine[1]).toMatchObject({
      id: succeeded,
      status: "succeeded",
      upstream_task_id: "up_7f3a9c",
      delivery: "pending",
      client_id: acme.id,
    });

    const done = JSON.parse((await cli(["tasks", "list", "--status", "succeeded", "--json"])).stdout) as {
      id: string;
    }[];
    expect(done.map((t) => t.id)).toEqual([succeeded]);
    expect(
      (JSON.parse((await cli(["tasks", "list", "--limit", "1", "--json"])).stdout) as { id: string }[]).map(
        (t) => t.id,
      ),
    ).toEqual([other]);

    const human = await cli(["tasks", "list", "--client", acme.id]);
    expect(human.status).toBe(0);
    expect(human.stdout.split("\n")[0]).toMatch(/^TASK +STATUS +TYPE +DELIVERY +CREATED +CLIENT +MODEL +UPSTREAM$/);
    expect(human.stdout).toMatch(
      new RegExp(`^${succeeded} +succeeded +image +pending +\\S+ +${acme.id} +p-image +up_7f3a9c$`, "m"),
    );
    expect(human.stdout).toMatch(new RegExp(`^${waiting} +queued +image +none `, "m"));
    expectNoSecrets(human.stdout);

    expect((await cli(["tasks", "list", "--status", "failed"])).stdout).toBe("no tasks match\n");
  });

  it.each([
    [["tasks", "list", "--status", "done"], /--status must be one of queued, processing, succeeded, failed, canceled/],
    [["tasks", "list", "--limit", "0"], /--limit must be a whole number from 1 to 1000/],
    [["tasks", "list", "--limit", "many"], /--limit must be a whole number from 1 to 1000/],
    [["tasks", "list", "--client", "cli_unknown"], /no client cli_unknown/],
    [["tasks", "explode"], /unknown command: tasks explode/],
  ])("%j exits 1 with a clear message", async (args, message) => {
    await setup();
    const run = await cli(args);
    expect(run.status).toBe(1);
    expect(run.stdout).toBe("");
    expect(run.stderr).toMatch(message);
    expect(run.stderr).toContain("--help");
  });
});

describe("--help and exit codes", () => {
  it.each([
    [
      ["db", "--help"],
      ["db backup FILE", "db stats"],
    ],
    [
      ["db", "backup", "--help"],
      ["db backup FILE [--force]", "To restore: stop the server", "db stats"],
    ],
    [
      ["db", "stats", "-h"],
      ["db stats [--json]", "db backup FILE"],
    ],
    [
      ["tasks", "--help"],
      ["tasks list [--client ID]", "tasks show ID"],
    ],
    [
      ["tasks", "list", "--help"],
      ["tasks list [--client ID] [--status S] [--limit N] [--json]", "tasks show ID"],
    ],
    [
      ["tasks", "show", "--help"],
      ["relay task id or upstream task id", "tasks list"],
    ],
    [
      ["clients", "update", "--help"],
      ["clients update ID", "clients create --name NAME"],
    ],
    [
      ["--help"],
      ["db backup FILE", "db stats", "tasks list", "tasks show ID", "clients create --name NAME", "Exit codes: 0"],
    ],
  ])("%j prints help on stdout and exits 0, without touching the database", async (args, expected) => {
    const run = await cli(args, { LOG_LEVEL: "not-a-level" });
    expect(run.status).toBe(0);
    expect(run.stderr).toBe("");
    for (const text of expected) expect(run.stdout).toContain(text);
    expect(existsSync(dbPath)).toBe(false);
  });

  it("a command group without a subcommand prints its usage on stderr and exits 1", async () => {
    const run = await cli(["db"]);
    expect(run.status).toBe(1);
    expect(run.stdout).toBe("");
    expect(run.stderr).toContain("db backup FILE");
  });

  it("a bad environment variable exits 2 for the new commands too", async () => {
    const run = await cli(["tasks", "list"], { TASK_RETENTION_DAYS: "forever" });
    expect(run.status).toBe(2);
    expect(run.stderr.trimEnd().split("\n")).toEqual([
      expect.stringMatching(/^genrelay: invalid environment variable TASK_RETENTION_DAYS: /),
    ]);
  });

  it("a file that is not a database exits 2", async () => {
    writeFileSync(dbPath, "this is not sqlite ".repeat(100));
    const run = await cli(["db", "stats"]);
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/^genrelay: cannot open the database at .*relay\.db: /);
  });
});
