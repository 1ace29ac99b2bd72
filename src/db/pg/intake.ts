import { getTableColumns } from "drizzle-orm";
import type { CreateResult, NewTaskRequest } from "../../store/store.js";
import type { TaskRow } from "../../store/rows.js";
import { tasks } from "./schema.js";
import { T, columnsOf, submitterPayload } from "./mapping.js";
import { loggedBytesOf } from "./stored-bytes-log.js";
import { checkNumber, checkWrittenText } from "../../store/values.js";
import { KEY_COLUMNS } from "./bound-values.js";
import { GRANT_HELD, type StoredBytesGrants, type TakenRoom } from "./stored-bytes-grants.js";

/** What a creation needs from the driver: one statement, and the per-request path for what a batch cannot take. */
export interface IntakePort {
  q(sql: string, values: unknown[]): Promise<Record<string, unknown>[]>;
  /** A named statement: prepared on each connection the first time it runs there. */
  run(statement: { name: string; text: string }, values: unknown[]): Promise<Record<string, unknown>[]>;
  single(req: NewTaskRequest): Promise<CreateResult>;
  /** This instance's room under its clients' stored-bytes bounds. */
  grants: StoredBytesGrants;
  /** Wakes the submitter of these accounts (PgContext.wakeSubmitter; `created`: creations without a deadline). */
  wake(accounts: Iterable<string>, created: boolean): Promise<void>;
  /** Whether that wake-up is a nudge of this process's own submitter (else a NOTIFY: PgContext.submitterHere). */
  wakesHere(accounts: Iterable<string>): boolean;
  /** The channel a NOTIFY wakes the other instances' submitters on. */
  channel: string;
}

interface Pending {
  req: NewTaskRequest;
  resolve: (result: CreateResult) => void;
  reject: (err: unknown) => void;
}

/** Every column an insert binds, with the defaults the schema gives an absent one. */
const COLUMNS = columnsOf(tasks);
const DEFAULTS: Record<string, unknown> = Object.fromEntries(
  Object.entries(getTableColumns(tasks))
    .filter(([, col]) => col.hasDefault && col.default !== undefined && typeof col.default !== "object")
    .map(([key, col]) => [key, col.default]),
);
/** Rows per statement. */
const MAX_BATCH = 256;

/**
 * The batch's statement: one text whatever the batch's size. $1 is the rows as one JSON array of
 * objects keyed by column name (rowsJson), read by json_populate_recordset; $2 the bounded clients,
 * $3 their bounds, $4 this instance's grant holder and, with `notify`, $5 the channel of the
 * submitters' NOTIFY and $6 its payload (submitterPayload). Prepared once per connection: a batch of VALUES tuples was a new text for
 * every size, parsed and planned again for each batch (about 1.3 ms of the server's CPU a batch,
 * a third of what it spent per creation at three instances). One JSON text rather than an array
 * per column: node-postgres escapes every element of an array in JavaScript (28 µs a row with a
 * request's JSON, against 8 µs for JSON.stringify and 2.4 µs for VALUES' separate parameters).
 * It returns the ids of the rows it wrote, not the rows: each is answered from the values it bound
 * (as SQLite's insert is), where `RETURNING *` sent every column back to be parsed again.
 */
function insertBatch(notify: boolean): { name: string; text: string } {
  const [clients, limits, holder, channel, payload] = [2, 3, 4, 5, 6];
  // Evaluated once, and only when the statement returns a row (one it wrote).
  const woke = notify ? `, (SELECT pg_notify($${channel}, $${payload}::text)) AS woke` : "";
  return {
    name: notify ? "genrelay_intake_batch_notify" : "genrelay_intake_batch",
    text: `WITH ins AS (
         INSERT INTO tasks (${COLUMNS.map(([, name]) => name).join(", ")})
           SELECT ${COLUMNS.map(([, name]) => `r.${name}`).join(", ")} FROM json_populate_recordset(NULL::tasks, $1::json) AS r
         ON CONFLICT (client_id, idempotency_key) DO NOTHING RETURNING id, client_id, stored_bytes
       ), per_client AS (
         SELECT client_id, sum(stored_bytes) AS bytes FROM ins GROUP BY client_id
       ), logged AS (
         INSERT INTO client_storage_log (client_id, bytes) SELECT client_id, bytes FROM per_client WHERE bytes <> 0 RETURNING client_id
       ), bound AS (
         SELECT * FROM unnest($${clients}::text[], $${limits}::bigint[]) AS b(client_id, max_bytes)
       ), held AS (
         ${GRANT_HELD(`ANY($${clients}::text[])`, `$${holder}`)}
       ), room AS (
         -- What is stored (a snapshot: bytes written since the grant, outputs say, count) leaves room for the rows.
         SELECT p.client_id FROM per_client p JOIN bound b USING (client_id) JOIN held h USING (client_id)
         WHERE coalesce((SELECT stored_bytes FROM client_storage s WHERE s.client_id = p.client_id), 0)
               + ${loggedBytesOf("p.client_id")} + p.bytes <= b.max_bytes
       )
       SELECT ins.id,
              CASE WHEN ins.client_id = ANY($${clients}::text[]) AND per_client.bytes > 0 AND room.client_id IS NULL
                   THEN ('past the storage grant: ' || ins.client_id)::bigint END AS over_grant${woke}
       FROM ins JOIN per_client USING (client_id) LEFT JOIN room USING (client_id)`,
  };
}
const INSERT_BATCH = insertBatch(false);
const INSERT_BATCH_NOTIFY = insertBatch(true);
/**
 * Batches written at once by an instance. While one commits, the creations that arrive wait and go
 * together in the next, so a batch fills with what came during a commit (a creation waits at most
 * one commit more); with one batch a turn, each instance of several wrote batches of one or two.
 */
const MAX_IN_FLIGHT = 1;
/**
 * Turns of the event loop a batch waits for more while creations keep arriving (the queue grew in
 * the last turn), as SQLite's intake does (INTAKE_FILL_TURNS): the requests of the connections the
 * last commit answered come back a turn or two later, and without the wait they made a batch of
 * their own. At three instances each serves a third of the connections, and its batches were a
 * third the size (about 4 rows against 13 at one), so a creation cost 1.4× as much as at one.
 */
const PG_INTAKE_FILL_TURNS = 2;
/**
 * How often at most an instance's batches send the leaders elsewhere a `created:` NOTIFY (creations
 * without a deadline). Every such NOTIFY wakes every instance's LISTEN session and its server
 * backend, and a leader whose account is full lets it pass (Nudges.created): at three instances,
 * two thirds of the batches carried one, three sessions woken by each. Creations committed within
 * this long of the last one are owed: the next batch's NOTIFY names their accounts, or, if none
 * comes by then, a NOTIFY of their own (sent after their commit, so the woken submitter sees them).
 * A creation with a deadline is told at once, with whatever is owed.
 */
export const CREATED_NOTIFY_EVERY_MS = 100;

/**
 * Group commit for PostgreSQL intake: creations that need no decision against the client's other
 * tasks (no waiting cap, no credit limit) and arrive in the same turn of the event loop, or while
 * the batch before commits (MAX_IN_FLIGHT), are written by one prepared `INSERT … SELECT … FROM
 * json_populate_recordset(…) ON CONFLICT DO NOTHING` (INSERT_BATCH) (one round trip and one durable commit for the batch, where a creation of its own takes
 * a transaction of several). A row the insert skipped is
 * an idempotent replay, answered with the original. If the statement fails (a hostile value in one
 * row refuses the whole statement), each creation of the batch is tried alone, so it fails alone.
 * Creations with a cap or a credit limit take the per-request path, under the client's credit lock (credit-books.ts).
 *
 * The same statement appends the rows' stored bytes to client_storage_log. For a client with a bound,
 * the rows' bytes are taken from this instance's room in memory first (stored-bytes-grants.ts), and
 * the statement holds the client's grant row FOR KEY SHARE, a lock no creation waits for: batches
 * of one instance or several never wait on each other. A client whose room ran out has its
 * creations decided alone, against the exact figure; when its grant was taken back meanwhile (or
 * what it stores leaves no room), the statement fails, so writes nothing, and each creation of the
 * batch is decided alone.
 */
export class PgIntakeBatches {
  private queue: Pending[] = [];
  private inFlight = 0;
  private scheduled = false;
  /** The queue's length when the scheduled flush last looked, and the turns it has waited. */
  private seen = 0;
  private waited = 0;
  /** When (performance.now()) this instance's batches last sent the submitters' NOTIFY. */
  private notifiedAt = Number.NEGATIVE_INFINITY;
  /** Accounts of committed creations no NOTIFY has named yet (CREATED_NOTIFY_EVERY_MS), and the timer that names them. */
  private readonly owed = new Set<string>();
  private owedTimer: NodeJS.Timeout | null = null;

  constructor(private readonly port: IntakePort) {}

  create(req: NewTaskRequest): Promise<CreateResult> {
    if (req.needs.waiting || req.needs.credit) return this.port.single(req);
    return new Promise((resolve, reject) => {
      this.queue.push({ req, resolve, reject });
      this.schedule();
    });
  }

  /** A flush at the end of this turn, unless batches in flight take the queue when they end. */
  private schedule(): void {
    if (this.scheduled || this.queue.length === 0 || this.inFlight >= MAX_IN_FLIGHT) return;
    this.scheduled = true;
    this.seen = this.queue.length;
    this.waited = 0;
    setImmediate(() => this.turn());
  }

  /** At the end of a turn: one more turn while creations are still arriving (at most PG_INTAKE_FILL_TURNS), else the flush. */
  private turn(): void {
    const arriving = this.queue.length > this.seen && this.queue.length < MAX_BATCH;
    if (arriving && this.waited < PG_INTAKE_FILL_TURNS) {
      this.seen = this.queue.length;
      this.waited++;
      setImmediate(() => this.turn());
      return;
    }
    this.scheduled = false;
    while (this.queue.length > 0 && this.inFlight < MAX_IN_FLIGHT) {
      this.inFlight++;
      void this.flush(this.queue.splice(0, MAX_BATCH)).finally(() => {
        this.inFlight--;
        this.schedule();
      });
    }
  }

  private async flush(batch: Pending[]): Promise<void> {
    const admitted: Pending[] = [];
    for (const item of batch) {
      try {
        // No cap and no credit limit: nothing to decide but the reservation, which is none.
        if (item.req.admit({ waiting: 0, position: undefined, learnedPrice: null }) !== 0)
          throw new Error("a creation without a credit limit reserved points");
        admitted.push(item);
      } catch (err) {
        item.reject(err);
      }
    }
    if (admitted.length === 0) return;
    // Room under the bounds, per client, from this instance's grants; a client without enough left
    // has its creations decided one by one, against the exact figure.
    const rooms: TakenRoom[] = [];
    const writing: Pending[] = [];
    for (const [clientId, items] of boundedByClient(admitted)) {
      if (items === null) continue;
      const bytes = items.reduce((n, p) => n + (p.req.row.storedBytes ?? 0), 0);
      const limit = Math.min(...items.map((p) => p.req.storedBytesLimit!));
      const room = await this.port.grants.take(clientId, bytes, limit).catch(() => null);
      if (room) rooms.push(room);
      else for (const item of items) this.port.single(item.req).then(item.resolve, item.reject);
    }
    const roomOf = new Set(rooms.map((r) => r.clientId));
    for (const item of admitted)
      if (item.req.storedBytesLimit == null || roomOf.has(item.req.row.clientId)) writing.push(item);
    if (writing.length === 0) return;
    // The submitters of the rows' accounts: this process's own after the commit, or the leaders
    // elsewhere by a NOTIFY in the insert's statement (no statement nor commit of its own).
    // Creations without a deadline: a submitter that found their account full lets the wake-up pass.
    const accounts = new Set(writing.map((p) => p.req.row.upstreamAccount));
    const created = writing.every((p) => p.req.row.expiresAt == null);
    const wakesHere = this.port.wakesHere(accounts);
    // Elsewhere, at most one `created:` NOTIFY each CREATED_NOTIFY_EVERY_MS, naming what is owed too.
    let payload: string | null = null;
    let told: string[] = [];
    const now = performance.now();
    if (!wakesHere && (!created || now - this.notifiedAt >= CREATED_NOTIFY_EVERY_MS)) {
      told = [...this.owed];
      this.owed.clear();
      payload = submitterPayload(new Set([...accounts, ...told]), created);
      this.notifiedAt = now;
    }
    let inserted: Map<string, TaskRow>;
    try {
      inserted = await this.insert(
        writing.map((p) => p.req),
        payload,
      );
    } catch {
      // Nothing written, nothing sent: what this NOTIFY was to name is owed again.
      this.owe(told);
      for (const room of rooms) {
        this.port.grants.settle(room, 0);
        this.port.grants.drop(room.clientId);
      }
      for (const item of writing) this.port.single(item.req).then(item.resolve, item.reject);
      return;
    }
    // The statement sends its NOTIFY only when it wrote a row.
    if (inserted.size === 0) this.owe(told);
    else if (!wakesHere && payload === null) this.owe([...inserted.values()].map((r) => r.upstreamAccount));
    for (const room of rooms) {
      let kept = 0;
      for (const row of inserted.values()) if (row.clientId === room.clientId) kept += row.storedBytes;
      this.port.grants.settle(room, kept);
    }
    const replays: Pending[] = [];
    for (const item of writing) {
      const row = inserted.get(item.req.row.id);
      if (row) item.resolve({ task: row, replayed: false });
      else replays.push(item);
    }
    // Skipped by ON CONFLICT: another creation with the same key committed first (or earlier in this batch).
    if (replays.length > 0) {
      try {
        const originals = await this.port.q(
          "SELECT t.* FROM tasks t JOIN unnest($1::text[], $2::text[]) AS k(client_id, key) ON t.client_id = k.client_id AND t.idempotency_key = k.key",
          [replays.map((p) => p.req.row.clientId), replays.map((p) => p.req.row.idempotencyKey)],
        );
        const byKey = new Map(originals.map((r) => [`${r.client_id as string}\n${r.idempotency_key as string}`, r]));
        for (const item of replays) {
          const original = byKey.get(`${item.req.row.clientId}\n${item.req.row.idempotencyKey}`);
          if (original) item.resolve({ task: T.row(original), replayed: true });
          else this.port.single(item.req).then(item.resolve, item.reject);
        }
      } catch (err) {
        for (const item of replays) item.reject(err);
      }
    }
    if (inserted.size > 0 && wakesHere)
      void this.port.wake(new Set([...inserted.values()].map((r) => r.upstreamAccount)), created).catch(() => {});
  }

  /**
   * Accounts of committed creations that no NOTIFY named yet: the next batch's NOTIFY names them, or
   * else one of their own once CREATED_NOTIFY_EVERY_MS has passed since the last. A NOTIFY that
   * fails is not sent again (the server is away: once the LISTEN sessions are back, every loop is
   * nudged; the submitter's idle tick stays the fallback).
   */
  private owe(accounts: Iterable<string>): void {
    for (const account of accounts) this.owed.add(account);
    if (this.owed.size === 0 || this.owedTimer) return;
    const wait = Math.max(0, this.notifiedAt + CREATED_NOTIFY_EVERY_MS - performance.now());
    this.owedTimer = setTimeout(() => {
      this.owedTimer = null;
      if (this.owed.size === 0) return;
      const accounts = [...this.owed];
      this.owed.clear();
      this.notifiedAt = performance.now();
      void this.port.wake(accounts, true).catch(() => {});
    }, wait);
    this.owedTimer.unref();
  }

  /**
   * One INSERT of the rows (INSERT_BATCH), their stored bytes logged in the same statement (rows skipped as
   * replays count nothing); the rows it wrote, by task id. For a bounded client the statement holds
   * this instance's grant row FOR KEY SHARE, so a take-back of the grants waits for it to end. Throws,
   * having written nothing, when a bounded client's grant is gone, or what it stores already leaves
   * no room for its rows: the statement's last step casts a text that is no number for such a row,
   * only then (a column of the row, so never folded early). With a `notify` payload, the statement
   * also sends the submitters' NOTIFY when it wrote a row (delivered at its commit).
   */
  private async insert(reqs: NewTaskRequest[], notify: string | null): Promise<Map<string, TaskRow>> {
    const bounds = new Map<string, number>();
    for (const req of reqs) {
      const limit = req.storedBytesLimit;
      if (limit !== null && limit !== undefined)
        bounds.set(req.row.clientId, Math.min(limit, bounds.get(req.row.clientId) ?? Infinity));
    }
    const { json, rows } = writtenRows(reqs);
    const values: unknown[] = [json, [...bounds.keys()], [...bounds.values()], this.port.grants.holder];
    if (notify !== null) values.push(this.port.channel, notify);
    const ids = await this.port.run(notify !== null ? INSERT_BATCH_NOTIFY : INSERT_BATCH, values);
    const byId = new Map(rows.map((row) => [row.id, row]));
    return new Map(ids.map((r) => [r.id as string, byId.get(r.id as string)!]));
  }
}

/** The indexed text columns of tasks: a value there is held to MAX_KEY_BYTES. */
const TASK_KEYS = KEY_COLUMNS.get("tasks") ?? new Set<string>();

/**
 * The rows of INSERT_BATCH's $1 (`json`, keyed by column name), each value under the store's value
 * rules as a bound parameter of its column would be (the rules see one JSON text here): text with
 * NUL, a key past MAX_KEY_BYTES or a number past 2**53 throws, so the batch writes nothing and each
 * creation is decided alone. `rows` are the same values as the store's rows: every column is text
 * or a number, so a row written is read back as exactly these.
 */
function writtenRows(reqs: NewTaskRequest[]): { json: string; rows: TaskRow[] } {
  const rows: TaskRow[] = [];
  const named = reqs.map((req) => {
    const given = req.row as Record<string, unknown>;
    const row: Record<string, unknown> = {};
    const out: Record<string, unknown> = {};
    for (const [key, name] of COLUMNS) {
      const v = key === "pointsReserved" ? 0 : (given[key] ?? DEFAULTS[key] ?? null);
      row[key] = out[name] =
        typeof v === "string"
          ? checkWrittenText(v, name, TASK_KEYS.has(name))
          : typeof v === "number"
            ? checkNumber(v, "write")
            : v;
    }
    rows.push(row as TaskRow);
    return out;
  });
  return { json: JSON.stringify(named), rows };
}

/** The creations of each client with a bound (null for a client without one), in first-seen order. */
function boundedByClient(items: Pending[]): Map<string, Pending[] | null> {
  const out = new Map<string, Pending[] | null>();
  for (const item of items) {
    const { clientId } = item.req.row;
    if (item.req.storedBytesLimit == null) {
      if (!out.has(clientId)) out.set(clientId, null);
      continue;
    }
    const list = out.get(clientId);
    if (list) list.push(item);
    else out.set(clientId, [item]);
  }
  return out;
}
