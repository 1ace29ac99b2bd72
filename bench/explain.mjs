// Query plans of the relay's hot queries (forked, driven over IPC). Rather than restating the SQL,
// it records what the built relay really executes: better-sqlite3's Statement methods are wrapped,
// then an in-process Relay (dist/relay.js, loops not started) takes a few creations, reads and list
// calls through app.request, and one tick of each worker runs against the given database. Each
// distinct statement then gets EXPLAIN QUERY PLAN and a timing on that database (writes inside a
// rolled-back savepoint).
import Database from "better-sqlite3";
import { distImport } from "./lib/dist.mjs";
import { serveIpc } from "./lib/proc.mjs";
import { median, round } from "./lib/stats.mjs";

const recorded = [];
let phase = "off";
let prepares = 0;

Error.stackTraceLimit = 60;

/** The relay function that ran a statement: the first dist/ frame of the stack (after drizzle's). */
function caller() {
  const lines = (new Error().stack ?? "").split("\n").slice(1);
  for (const line of lines) {
    const m = /at (?:(?:async )?([\w.<>$]+) \()?file:\/\/[^)]*\/dist\/([\w/.-]+\.js):\d+/.exec(line);
    if (m && !m[2].includes("node_modules")) return `${m[1] ?? "(anonymous)"} (${m[2].replace(/\.js$/, "")})`;
  }
  return null;
}

function instrument() {
  const probe = new Database(":memory:");
  const proto = Object.getPrototypeOf(probe.prepare("SELECT 1"));
  probe.close();
  for (const method of ["run", "get", "all", "iterate"]) {
    const original = proto[method];
    proto[method] = function (...params) {
      if (phase !== "off") recorded.push({ phase, sql: this.source, params, reader: this.reader, caller: caller() });
      return original.apply(this, params);
    };
  }
  const prepare = Database.prototype.prepare;
  Database.prototype.prepare = function (...args) {
    if (phase !== "off") prepares++;
    return prepare.apply(this, args);
  };
}

function describe(sqlText) {
  const s = sqlText.replace(/\s+/g, " ").trim();
  const verb = /^(with|select|insert|update|delete)/i.exec(s)?.[1]?.toUpperCase() ?? s.split(" ")[0];
  const table =
    /^(?:insert into|update|delete from)\s+"?(\w+)"?/i.exec(s)?.[1] ?? /\bfrom\s+"?(\w+)"?/i.exec(s)?.[1] ?? "?";
  const where = /\bwhere\b(.*?)(\border by\b|\blimit\b|\bgroup by\b|\breturning\b|$)/i.exec(s)?.[1] ?? "";
  const cols = [
    ...new Set(
      [...where.matchAll(/"(?:\w+)"\."(\w+)"|\b(\w+)\s*(?:=|<=|<|>|>=| IS | in )/gi)].map((m) => m[1] ?? m[2]),
    ),
  ]
    .filter((c) => c && !/^(and|or|not|select|null)$/i.test(c))
    .slice(0, 5);
  return `${verb === "WITH" ? "SELECT (CTE)" : verb} ${table}${cols.length ? ` [${cols.join(", ")}]` : ""}`;
}

function plan(sqlite, sqlText, params, tables) {
  const rows = sqlite.prepare(`EXPLAIN QUERY PLAN ${sqlText}`).all(...params);
  const lines = rows.map((r) => r.detail);
  const fullScans = [];
  const indexScans = [];
  for (const d of lines) {
    const m = /^SCAN (\w+)(?: AS \w+)?(.*)$/.exec(d);
    if (!m || !tables.has(m[1])) continue;
    if (/USING (COVERING )?INDEX/.test(m[2])) indexScans.push(d);
    else fullScans.push(d);
  }
  return {
    plan: lines,
    full_scan: fullScans.length > 0,
    full_scans: fullScans,
    index_scans: indexScans,
    temp_btree: lines.some((d) => d.includes("TEMP B-TREE")),
  };
}

/** For a recorded INSERT, the value of its "id" column (the row exists now: it is removed before timing). */
function insertedId(sqlText, params) {
  const m = /^insert into "?(\w+)"? \(([^)]*)\) values \((.*?)\)( returning|$)/is.exec(sqlText.trim());
  if (!m) return null;
  const cols = m[2].split(",").map((c) => c.trim().replace(/"/g, ""));
  const values = m[3].split(",").map((v) => v.trim());
  let p = 0;
  for (let i = 0; i < values.length; i++) {
    if (values[i] !== "?") continue;
    if (cols[i] === "id") return { table: m[1], id: params[p] };
    p++;
  }
  return null;
}

function time(sqlite, sqlText, params, reader, repeat) {
  const stmt = sqlite.prepare(sqlText);
  const existing = insertedId(sqlText, params);
  const samples = [];
  for (let i = 0; i < repeat; i++) {
    // Every statement (UPDATE ... RETURNING is a "reader" too) runs inside a savepoint that is rolled back.
    sqlite.exec("SAVEPOINT bench_explain");
    try {
      if (existing) sqlite.prepare(`DELETE FROM "${existing.table}" WHERE id = ?`).run(existing.id);
      const t0 = performance.now();
      if (reader) stmt.all(...params);
      else stmt.run(...params);
      samples.push(performance.now() - t0);
    } finally {
      sqlite.exec("ROLLBACK TO bench_explain; RELEASE bench_explain");
    }
  }
  return median(samples);
}

serveIpc({
  /** Times statements recorded by `explain` on another database (params with `replace` keys swapped). */
  retime({ databasePath, queries, replace = {}, repeat = 5 }) {
    const sqlite = new Database(databasePath);
    sqlite.pragma("foreign_keys = ON");
    const out = [];
    for (const q of queries) {
      const params = q.params.map((p) => (typeof p === "string" && p in replace ? replace[p] : p));
      let ms = null;
      let error;
      try {
        ms = round(time(sqlite, q.sql, params, q.reader, repeat), 3);
      } catch (err) {
        error = err.message;
      }
      out.push({ ms, ...(error ? { error } : {}) });
    }
    const taskRows = sqlite.prepare("SELECT phase, count(*) AS n FROM tasks GROUP BY phase").all();
    sqlite.close();
    return { phases: Object.fromEntries(taskRows.map((r) => [r.phase, r.n])), timings: out };
  },

  async explain({ databasePath, apiKey, upstreamUrl, repeat = 5 }) {
    instrument();
    const { systemClock } = await distImport("clock.js");
    const { loadConfig } = await distImport("config.js");
    const { openDatabase } = await distImport("db/sqlite/open.js");
    const { silentLogger } = await distImport("logger.js");
    const { Relay } = await distImport("relay.js");
    const config = loadConfig({
      DATABASE_PATH: databasePath,
      UPSTREAM_BASE_URL: upstreamUrl,
      UPSTREAM_API_KEY: "sandbox",
      UPSTREAM_READS_PER_MINUTE: "100000",
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
    });
    const database = openDatabase(databasePath);
    const { sqliteStore } = await distImport("open-store.js");
    const relay = new Relay({
      config,
      store: sqliteStore(database),
      clock: systemClock,
      logger: silentLogger,
      upstream: { baseUrl: upstreamUrl, apiKey: "sandbox" },
    });
    const auth = { authorization: `Bearer ${apiKey}` };
    const post = (key, body) =>
      relay.app.request("http://127.0.0.1/openapi/v1/images/generations", {
        method: "POST",
        headers: { ...auth, "content-type": "application/json", "idempotency-key": key },
        body: JSON.stringify(body),
      });
    const body = {
      model: "p-image",
      mode: "generate",
      prompt: "a lighthouse at dawn",
      count: 1,
      callback_url: "http://127.0.0.1:9/hook",
      metadata: { order_id: "1" },
    };
    const tag = Date.now().toString(36);

    // Intake: statements and prepares per accepted creation (the average of 5), then a replay.
    phase = "intake";
    const before = { statements: recorded.length, prepares };
    const ids = [];
    for (let i = 0; i < 5; i++) {
      const res = await post(`explain-${tag}-${i}`, { ...body, prompt: `${body.prompt} ${i}` });
      if (res.status !== 201) throw new Error(`intake answered ${res.status}: ${await res.text()}`);
      ids.push((await res.json()).data.id);
    }
    const perCreation = {
      statements: (recorded.length - before.statements) / 5,
      prepares: (prepares - before.prepares) / 5,
    };
    phase = "intake (replay)";
    await post(`explain-${tag}-0`, { ...body, prompt: `${body.prompt} 0` });

    phase = "read";
    await relay.app.request(`http://127.0.0.1/openapi/v1/tasks/${ids[0]}`, { headers: auth });
    phase = "list";
    const list = await relay.app.request("http://127.0.0.1/openapi/v1/tasks?limit=20", { headers: auth });
    const cursor = (await list.json()).next_cursor;
    if (cursor)
      await relay.app.request(`http://127.0.0.1/openapi/v1/tasks?limit=20&cursor=${encodeURIComponent(cursor)}`, {
        headers: auth,
      });
    await relay.app.request("http://127.0.0.1/openapi/v1/tasks?limit=20&status=succeeded", { headers: auth });
    // A filter that matches few of the client's tasks (none failed here): the worst case of the same statement.
    phase = "list (rare status)";
    await relay.app.request("http://127.0.0.1/openapi/v1/tasks?limit=20&status=failed", { headers: auth });

    phase = "submitter";
    await relay.submitter.runOnce();
    phase = "poller";
    await relay.poller.runOnce();
    phase = "off";
    // One of the new tasks ends (as the poller would end it), so its event is due for delivery.
    database.sqlite
      .prepare(
        "UPDATE tasks SET phase = 'done', status = 'succeeded', completed_at = ?, next_run_at = NULL WHERE id = ?",
      )
      .run(Date.now(), ids[1]);
    database.sqlite
      .prepare(
        "INSERT INTO events (id, client_id, task_id, type, sequence, payload, callback_url, delivery_status, next_attempt_at, created_at) SELECT 'evt_' || id, client_id, id, 'task.succeeded', 1, '{}', callback_url, 'pending', 0, ? FROM tasks WHERE id = ?",
      )
      .run(Date.now(), ids[1]);
    phase = "dispatcher";
    await relay.dispatcher.runOnce();
    phase = "pruner";
    await relay.pruner.runOnce();
    phase = "off";

    await relay.stop(2_000);
    const tables = new Set(
      database.sqlite
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .all()
        .map((r) => r.name),
    );
    const seen = new Map();
    for (const r of recorded) {
      if (/^\s*(EXPLAIN|PRAGMA|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)/i.test(r.sql)) continue;
      if (/__drizzle_migrations|sqlite_master/.test(r.sql)) continue;
      // The rare-status list runs the same SQL as the common one: kept apart, with its own parameters.
      const key = r.phase === "list (rare status)" && /"tasks"\."status" = \?/.test(r.sql) ? `${r.sql}#rare` : r.sql;
      const entry = seen.get(key);
      if (entry) entry.calls++;
      else seen.set(key, { ...r, calls: 1 });
    }
    const queries = [];
    for (const r of seen.values()) {
      let planned;
      try {
        planned = plan(database.sqlite, r.sql, r.params, tables);
      } catch (err) {
        planned = {
          plan: [`(no plan: ${err.message})`],
          full_scan: false,
          full_scans: [],
          index_scans: [],
          temp_btree: false,
        };
      }
      let ms = null;
      try {
        ms = round(time(database.sqlite, r.sql, r.params, r.reader, repeat), 3);
      } catch (err) {
        ms = null;
        planned.timing_error = err.message;
      }
      // How big each fully scanned table is: a scan of a handful of rows is not a scan of a million.
      planned.scan_rows = Object.fromEntries(
        planned.full_scans.map((line) => {
          const table = /^SCAN (\w+)/.exec(line)[1];
          return [table, database.sqlite.prepare(`SELECT count(*) AS n FROM "${table}"`).get().n];
        }),
      );
      queries.push({
        phase: r.phase,
        name: r.caller ?? describe(r.sql),
        shape: describe(r.sql),
        calls: r.calls,
        ms,
        ...planned,
        sql: r.sql.replace(/\s+/g, " ").trim(),
        reader: r.reader,
        params: r.params.map((p) => (Buffer.isBuffer(p) ? null : p)),
      });
    }
    const taskRows = database.sqlite.prepare("SELECT count(*) AS n FROM tasks").get().n;
    database.close();
    return { task_rows: taskRows, per_creation: perCreation, queries };
  },
});
