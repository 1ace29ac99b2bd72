// What the minimal prototypes share (bench/proto/*.mjs): request validation with zod (the same
// fields as the relay's creation body, src/http/schemas.ts), the task row intake writes, ids in the
// relay's format, Standard Webhooks signing, and the SQLite connection with the relay's durable settings.
// Nothing here imports the relay's build: a prototype is a baseline that a change to src/ cannot move.
import Database from "better-sqlite3";
import { createHash, createHmac, randomBytes } from "node:crypto";
import { z } from "zod";

export const MAX_BODY_BYTES = 1024 * 1024;
const TASK_EVENT_TYPES = ["task.processing", "task.succeeded", "task.failed", "task.canceled"];
const DEFAULT_EVENTS = ["task.succeeded", "task.failed", "task.canceled"];
const IDEMPOTENCY_KEY = /^[A-Za-z0-9._:-]{8,128}$/;
/** Fields the relay keeps for itself (never sent upstream); the rest is the upstream body. */
const RELAY_FIELDS = ["callback_url", "callback_events", "metadata", "callback_headers", "expires_after_seconds"];
/** Fields that do not change a task's price (the relay's CONTENT_FIELDS idea: the price key leaves them out). */
const CONTENT_FIELDS = new Set(["prompt", "negative_prompt", "seed"]);

const hasNul = (s) => s.includes("\u0000");
function noNul(value, ctx) {
  if (typeof value === "string") {
    if (hasNul(value)) ctx.addIssue({ code: "custom", message: "must not contain NUL (\\u0000)" });
  } else if (Array.isArray(value)) {
    for (const v of value) noNul(v, ctx);
  } else if (typeof value === "object" && value !== null) {
    for (const [k, v] of Object.entries(value)) {
      if (hasNul(k)) ctx.addIssue({ code: "custom", message: "field names must not contain NUL" });
      else noNul(v, ctx);
    }
  }
}

const nonBlank3 = (s) => s.replace(/\s/g, "").length >= 3;

/** The image creation body, field for field as the relay's ImageGenerationBody (near-miss field names aside). */
export const ImageBody = z
  .looseObject({
    model: z.string().min(1),
    mode: z.enum(["generate", "edit"]),
    prompt: z.string().refine(nonBlank3).max(32_768),
    count: z.literal(1),
    image_urls: z.array(z.string()).min(1).optional(),
    aspect_ratio: z.string().optional(),
    size: z.string().optional(),
    resolution: z.string().optional(),
    quality: z.string().optional(),
    callback_url: z.string().max(2048).optional(),
    callback_events: z
      .array(z.enum(TASK_EVENT_TYPES))
      .min(1)
      .refine((a) => new Set(a).size === a.length)
      .optional(),
    metadata: z
      .record(z.string().max(256), z.string())
      .refine((m) => Object.keys(m).length <= 16)
      .refine((m) => Buffer.byteLength(JSON.stringify(m)) <= 4096)
      .optional(),
    callback_headers: z.record(z.string(), z.string()).optional(),
    expires_after_seconds: z
      .number()
      .int()
      .min(1)
      .max(7 * 24 * 3600)
      .optional(),
  })
  .superRefine((body, ctx) => {
    if (body.mode === "edit" && !body.image_urls)
      ctx.addIssue({ code: "custom", path: ["image_urls"], message: "is required when mode is edit" });
    noNul(body, ctx);
  });

/** JSON with object keys sorted at every depth (the request hash must not depend on key order). */
export function canonicalJson(value) {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    return `{${Object.keys(value)
      .sort()
      .filter((k) => value[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k])}`)
      .join(",")}}`;
  }
  return JSON.stringify(value);
}

export const sha256Hex = (text) => createHash("sha256").update(text, "utf8").digest("hex");

/** An absolute https URL without credentials (http too when private networks are allowed, as the relay's check). */
function callbackProblem(raw, allowHttp) {
  if (raw.length === 0 || /[\s\u0000-\u001f\u007f]/.test(raw)) return "contains whitespace or control characters";
  let url;
  try {
    url = new URL(raw);
  } catch {
    return "not an absolute URL";
  }
  if (url.protocol !== "https:" && !(allowHttp && url.protocol === "http:"))
    return `scheme ${url.protocol} is not allowed`;
  if (url.username || url.password) return "contains credentials";
  return null;
}

const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz";
let pool = randomBytes(4096);
let at = 0;
/** `prefix_` + 10 characters of millisecond time + 16 random characters, as the relay's ids. */
export function newId(prefix, ms = Date.now()) {
  let time = "";
  for (let i = 0, t = ms; i < 10; i++, t = Math.floor(t / 32)) time = ALPHABET[t % 32] + time;
  if (at + 16 > pool.length) {
    pool = randomBytes(4096);
    at = 0;
  }
  let tail = "";
  for (let i = 0; i < 16; i++) tail += ALPHABET[pool[at++] & 31];
  return `${prefix}_${time}${tail}`;
}

export const iso = (ms) => (ms === null || ms === undefined ? null : new Date(ms).toISOString());

/**
 * Validates one creation: Idempotency-Key, the JSON body (zod), the callback URL. Returns
 * { status, error } for a refusal, or { row } with the task row intake stores.
 */
export function taskFromRequest({ client, idempotencyKey, text, now, allowHttpCallbacks }) {
  if (idempotencyKey === undefined || !IDEMPOTENCY_KEY.test(idempotencyKey))
    return { status: 400, error: "invalid_idempotency_key" };
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    return { status: 400, error: "invalid_json" };
  }
  const parsed = ImageBody.safeParse(json);
  if (!parsed.success) return { status: 422, error: "validation_error", issues: parsed.error.issues.length };
  const body = parsed.data;
  if (body.callback_url !== undefined && callbackProblem(body.callback_url, allowHttpCallbacks))
    return { status: 422, error: "invalid_callback_url" };
  const upstream = {};
  const priced = {};
  for (const [k, v] of Object.entries(body)) {
    if (RELAY_FIELDS.includes(k)) continue;
    upstream[k] = v;
    if (!CONTENT_FIELDS.has(k)) priced[k] = k === "image_urls" ? v.length : v;
  }
  const id = newId("task", now);
  return {
    row: {
      id,
      client_id: client.id,
      type: "image",
      model: body.model,
      status: "queued",
      phase: "waiting",
      request_json: JSON.stringify(upstream),
      callback_url: body.callback_url ?? null,
      callback_events: JSON.stringify(body.callback_events ?? DEFAULT_EVENTS),
      metadata_json: body.metadata ? JSON.stringify(body.metadata) : null,
      idempotency_key: idempotencyKey,
      request_hash: sha256Hex(`image\n${canonicalJson(body)}`),
      upstream_account: client.upstream_account,
      upstream_idempotency_key: `genrelay-${id}`,
      price_key: `image:${body.model}:${sha256Hex(canonicalJson(priced)).slice(0, 32)}`,
      next_run_at: now,
      expires_at: body.expires_after_seconds ? now + body.expires_after_seconds * 1000 : null,
      created_at: now,
      updated_at: now,
    },
  };
}

/** The columns intake writes (everything else keeps the table's defaults). */
export const INTAKE_COLUMNS = [
  "id",
  "client_id",
  "type",
  "model",
  "status",
  "phase",
  "request_json",
  "callback_url",
  "callback_events",
  "metadata_json",
  "idempotency_key",
  "request_hash",
  "upstream_account",
  "upstream_idempotency_key",
  "price_key",
  "next_run_at",
  "expires_at",
  "created_at",
  "updated_at",
];

/** The 201 body: the task as GET /tasks/{id} shows it (the relay's TaskView). */
export function taskView(row) {
  return {
    data: {
      id: row.id,
      type: row.type,
      status: row.status,
      model: row.model,
      created_at: iso(row.created_at),
      updated_at: iso(row.updated_at),
      completed_at: iso(row.completed_at ?? null),
      upstream_task_id: row.upstream_task_id ?? null,
      error: null,
      metadata: row.metadata_json ? JSON.parse(row.metadata_json) : null,
      callback: { url: row.callback_url, events: JSON.parse(row.callback_events) },
    },
    output: row.output_json ? JSON.parse(row.output_json) : null,
    usage: { points_charged: row.points_charged ?? null, points_refunded: row.points_refunded ?? null },
  };
}

/**
 * Clients by SHA-256 of their API key, kept in memory: the database is read once per unknown key
 * (and a revoked or unknown key is remembered as such).
 */
export function apiKeyCache(lookup) {
  const cache = new Map();
  return (header) => {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(header ?? "");
    if (!m) return null;
    const hash = sha256Hex(m[1]);
    if (!cache.has(hash)) cache.set(hash, lookup(hash) ?? null);
    return cache.get(hash);
  };
}

/** Reads a request body up to MAX_BODY_BYTES; calls back with the text, or null when too large. */
export function readBody(req, done) {
  const declared = Number(req.headers["content-length"] ?? 0);
  if (declared > MAX_BODY_BYTES) {
    req.resume();
    return done(null);
  }
  const chunks = [];
  let size = 0;
  req.on("data", (c) => {
    size += c.length;
    if (size <= MAX_BODY_BYTES) chunks.push(c);
  });
  req.on("end", () =>
    done(
      size > MAX_BODY_BYTES
        ? null
        : chunks.length === 1
          ? chunks[0].toString("utf8")
          : Buffer.concat(chunks).toString("utf8"),
    ),
  );
}

export function sendJson(res, status, body, headers = {}) {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text), ...headers });
  res.end(text);
}

/**
 * The HTTP side of intake: POST /openapi/v1/images/generations, Bearer key (clientOf), body read and
 * validated; `accept({ row, res })` stores the row and answers.
 */
export function creationHandler({ clientOf, accept, allowHttpCallbacks = false }) {
  return (req, res) => {
    if (req.method !== "POST" || req.url !== "/openapi/v1/images/generations") {
      req.resume();
      return sendJson(res, 404, { error: { code: "not_found" } });
    }
    const client = clientOf(req.headers.authorization);
    if (!client) {
      req.resume();
      return sendJson(res, 401, { error: { code: "invalid_api_key" } });
    }
    readBody(req, (text) => {
      if (text === null) return sendJson(res, 413, { error: { code: "payload_too_large" } }, { connection: "close" });
      const verdict = taskFromRequest({
        client,
        idempotencyKey: req.headers["idempotency-key"],
        text,
        now: Date.now(),
        allowHttpCallbacks,
      });
      if (!verdict.row) return sendJson(res, verdict.status, { error: { code: verdict.error } });
      accept({ row: verdict.row, res });
    });
  };
}

/** The relay's SQLite settings: WAL, synchronous=FULL (a commit is on disk before it returns), busy_timeout, foreign keys. */
export function openSqlite(path) {
  const db = new Database(path);
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = FULL");
  db.pragma("busy_timeout = 5000");
  db.pragma("foreign_keys = ON");
  return db;
}

/**
 * Runs `apply(items)` once per event-loop turn for everything queued during that turn (group commit):
 * the caller wraps it in one transaction. With `delayMs`, a batch waits up to that long after its
 * first item (or until `max` items) before it is applied: fewer, larger commits.
 */
export function perTurn(apply, { delayMs = 0, max = Infinity } = {}) {
  let queued = [];
  let scheduled = null;
  const flush = () => {
    if (scheduled !== null) (delayMs > 0 ? clearTimeout : clearImmediate)(scheduled);
    scheduled = null;
    const items = queued;
    queued = [];
    apply(items);
  };
  return (item) => {
    queued.push(item);
    if (queued.length >= max) flush();
    else if (scheduled === null) scheduled = delayMs > 0 ? setTimeout(flush, delayMs) : setImmediate(flush);
  };
}

/**
 * The sleep of a claim loop that found nothing to do: `later(ms)` arms one timer (if none is armed)
 * that calls `wake`; `now()` disarms it and calls `wake` at once (new rows were written); `cancel()` on stop.
 */
export function alarm(wake) {
  let timer = null;
  return {
    get armed() {
      return timer !== null;
    },
    later(ms) {
      if (timer !== null) return;
      timer = setTimeout(() => {
        timer = null;
        wake();
      }, ms);
    },
    now() {
      this.cancel();
      wake();
    },
    cancel() {
      if (timer !== null) clearTimeout(timer);
      timer = null;
    },
  };
}

/** Standard Webhooks v1: `v1,` + base64 HMAC-SHA256 of `id.timestamp.body` with the decoded whsec_ secret. */
export function webhookSigner(secret) {
  const key = Buffer.from(secret.slice("whsec_".length), "base64");
  return (msgId, timestampSec, body) =>
    `v1,${createHmac("sha256", key).update(`${msgId}.${timestampSec}.${body}`, "utf8").digest("base64")}`;
}

/** Stops on SIGTERM/SIGINT after `close` (a prototype runs as its own process, like the relay). */
export function onStop(close) {
  for (const signal of ["SIGTERM", "SIGINT"]) {
    process.once(signal, () => {
      void Promise.resolve(close()).finally(() => process.exit(0));
    });
  }
}
