import type { TaskStatus } from "../statuses.js";
import type { TaskPage, UpstreamErrorInfo, UpstreamTask, UpstreamUsage } from "./types.js";

/**
 * The tolerant reader (docs/contract.md, "Tolerant reading"). The reference shows only a few fields of a task
 * and none of the list or catalog shapes, so every field is looked for in each place
 * it plausibly lives and anything unexpected degrades to null instead of throwing.
 * Every function here is pure and total: arbitrary JSON never makes one throw.
 */

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Value at a dotted path, or undefined when any step is missing or not an object. */
function at(v: unknown, ...path: string[]): unknown {
  let cur: unknown = v;
  for (const key of path) {
    if (!isObj(cur) || !Object.hasOwn(cur, key)) return undefined;
    cur = cur[key];
  }
  return cur;
}

function nonEmptyString(v: unknown): string | null {
  return typeof v === "string" && v.length > 0 ? v : null;
}

/** Longest upstream task id the relay binds a task to; a longer one is no id it can store and look up. */
export const MAX_UPSTREAM_ID_LENGTH = 256;

/**
 * Whether a string can be stored as it is: PostgreSQL text refuses NUL, and SQLite would keep
 * it but end it there for every C reader. Checked here, where the upstream answer is read (docs/contract.md, "Upstream answers").
 */
export function storable(v: string): boolean {
  return !v.includes("\u0000");
}

/**
 * Ids are strings in the reference; a numeric id is accepted rather than dropped (only an exact
 * integer: 1e21 or 1.5 would come back as another string). An id the store cannot hold is none.
 */
function idValue(v: unknown): string | null {
  if (typeof v === "number") return Number.isSafeInteger(v) ? String(v) : null;
  return idText(v);
}

/** A string id (a request id, say) the store can hold, or null. */
function idText(v: unknown): string | null {
  const s = nonEmptyString(v);
  return s !== null && s.length <= MAX_UPSTREAM_ID_LENGTH && storable(s) ? s : null;
}

/** Text kept from an answer (codes, messages): NUL becomes U+FFFD, so no store or log chokes on it. */
function cleanText(v: string | null): string | null {
  return v === null || storable(v) ? v : v.replaceAll("\u0000", "\ufffd");
}

/** Largest charge or refund of one task the relay trusts (a 32-bit integer; the books sum many). */
export const MAX_POINTS = 2 ** 31 - 1;

/**
 * A number of points as the upstream wrote it, or null when it cannot be trusted (docs/contract.md, "Upstream answers"): a
 * whole number from 0 to MAX_POINTS, or a string of digits (read as its number). Missing,
 * negative, fractional, out of range or anything else is null: never "free".
 */
export function pointsValue(v: unknown): number | null {
  let n: number;
  if (typeof v === "number") n = v;
  else if (typeof v === "string" && /^\s*\d{1,12}\s*$/.test(v)) n = Number(v);
  else return null;
  return Number.isInteger(n) && n >= 0 && n <= MAX_POINTS ? n : null;
}

/** JSON.parse that reports failure instead of throwing. An empty body is not JSON. */
export function parseJson(text: string): { ok: true; value: unknown } | { ok: false } {
  if (text.trim() === "") return { ok: false };
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch {
    return { ok: false };
  }
}

const STATUS_ALIASES: Readonly<Record<string, TaskStatus>> = {
  queued: "queued",
  pending: "queued",
  created: "queued",
  processing: "processing",
  running: "processing",
  in_progress: "processing",
  succeeded: "succeeded",
  success: "succeeded",
  completed: "succeeded",
  failed: "failed",
  error: "failed",
  canceled: "canceled",
  cancelled: "canceled",
};

/** Upstream status word → relay status; null for anything unknown ("no change" for the caller). */
export function mapStatus(value: unknown): TaskStatus | null {
  if (typeof value !== "string") return null;
  const key = value
    .trim()
    .toLowerCase()
    .replace(/[\s-]+/g, "_");
  return Object.hasOwn(STATUS_ALIASES, key) ? (STATUS_ALIASES[key] ?? null) : null;
}

export function findTaskId(body: unknown): string | null {
  return (
    idValue(at(body, "data", "id")) ??
    idValue(at(body, "id")) ??
    idValue(at(body, "data", "task_id")) ??
    idValue(at(body, "task_id"))
  );
}

/**
 * Whether the body names a task id at all, usable or not: a creation answer whose id is there but
 * cannot be stored (NUL, too long) is an upstream defect, not a body that may read better next time.
 */
export function namesTaskId(body: unknown): boolean {
  return [at(body, "data", "id"), at(body, "id"), at(body, "data", "task_id"), at(body, "task_id")].some(
    (v) => v !== undefined && v !== null && v !== "",
  );
}

function findStatus(body: unknown): TaskStatus | null {
  // The first place holding a status we recognise wins; an unknown word in one
  // place must not hide a known one in the other.
  return mapStatus(at(body, "data", "status")) ?? mapStatus(at(body, "status"));
}

function findOutput(body: unknown): unknown {
  // The reference puts output at the top level; data.output is the flattened variant.
  const top = at(body, "output");
  if (top !== undefined && top !== null) return top;
  const nested = at(body, "data", "output");
  if (nested !== undefined && nested !== null) return nested;
  return null;
}

function findUsage(body: unknown): UpstreamUsage {
  const field = (name: string): number | null =>
    pointsValue(at(body, "usage", name)) ?? pointsValue(at(body, "data", "usage", name));
  const charged = field("points_charged");
  const refunded = field("points_refunded");
  // A refund of more than was charged would hand the client room nobody paid for.
  return {
    pointsCharged: charged,
    pointsRefunded: refunded !== null && charged !== null && refunded > charged ? null : refunded,
  };
}

/**
 * A task's failure details. An object with neither code nor message (e.g. `error: {}`
 * on a succeeded task) counts as no error; a bare string is kept as the message.
 */
export function parseErrorInfo(v: unknown): UpstreamErrorInfo | null {
  if (typeof v === "string") {
    return v.length > 0 ? { code: "upstream_error", message: cleanText(v)!, request_id: null } : null;
  }
  if (!isObj(v)) return null;
  const code = idValue(v.code);
  const message = cleanText(nonEmptyString(v.message));
  if (code === null && message === null) return null;
  return {
    code: code ?? "upstream_error",
    message: message ?? "",
    request_id: idText(v.request_id),
  };
}

function findError(body: unknown): UpstreamErrorInfo | null {
  return parseErrorInfo(at(body, "error")) ?? parseErrorInfo(at(body, "data", "error"));
}

/**
 * A task from a creation/read body or a list item. Returns null when no id can be
 * found, unless fallbackId is given (a read of a known id) and the body is an object.
 */
export function parseTask(body: unknown, fallbackId?: string): UpstreamTask | null {
  let id = findTaskId(body);
  if (id === null && fallbackId !== undefined && isObj(body)) id = fallbackId;
  if (id === null) return null;
  return {
    id,
    status: findStatus(body),
    output: findOutput(body),
    usage: findUsage(body),
    error: findError(body),
    raw: body,
  };
}

function findItems(body: unknown): unknown[] | null {
  const candidates = [
    at(body, "data"),
    at(body, "data", "items"),
    at(body, "data", "tasks"),
    at(body, "items"),
    at(body, "tasks"),
  ];
  for (const c of candidates) if (Array.isArray(c)) return c;
  return null;
}

function findNextCursor(body: unknown): string | null {
  // An empty cursor would make a pager fetch page one forever, so it means "no more".
  return (
    nonEmptyString(at(body, "next_cursor")) ??
    nonEmptyString(at(body, "data", "next_cursor")) ??
    nonEmptyString(at(body, "cursor", "next")) ??
    nonEmptyString(at(body, "next"))
  );
}

/** A page of the task list, or null when no item array is found (the caller falls back to single reads). */
export function parseTaskList(body: unknown): TaskPage | null {
  const items = findItems(body);
  if (items === null) return null;
  const tasks: UpstreamTask[] = [];
  for (const item of items) {
    const task = parseTask(item);
    if (task !== null) tasks.push(task);
  }
  return { tasks, nextCursor: findNextCursor(body) };
}

export interface ParsedErrorBody {
  /** null when the body carried no code; the caller substitutes http_<status>. */
  code: string | null;
  message: string | null;
  requestId: string | null;
  details: unknown;
}

const MAX_TEXT_MESSAGE = 300;

/**
 * An error response body: `{"error":{code,message,request_id,details}}` per the
 * reference, but also a top-level `{code,message}`, `{"error":"text"}`, plain text
 * (an HTML page from a proxy, say) and an empty body.
 */
export function parseErrorBody(text: string): ParsedErrorBody {
  const parsed = parseJson(text);
  if (!parsed.ok) {
    const trimmed = text.trim();
    return {
      code: null,
      message: trimmed === "" ? null : cleanText(truncate(trimmed, MAX_TEXT_MESSAGE)),
      requestId: null,
      details: undefined,
    };
  }
  const body = parsed.value;
  const err = at(body, "error");
  const source = isObj(err) ? err : body;
  const stringError = typeof err === "string" && err.length > 0 ? err : null;
  return {
    code: idValue(at(source, "code")),
    message: cleanText(nonEmptyString(at(source, "message")) ?? stringError),
    requestId: idText(at(source, "request_id")) ?? idText(at(body, "request_id")),
    details: at(source, "details"),
  };
}

function truncate(s: string, max: number): string {
  return s.length <= max ? s : `${s.slice(0, max)}…`;
}

/** Retry-After is capped: a broken or hostile header must not park an account for days. */
export const MAX_RETRY_AFTER_MS = 60 * 60 * 1000;

/**
 * Retry-After as milliseconds from now: delta-seconds or an HTTP-date. A date in the
 * past gives 0; anything unreadable gives null.
 */
export function parseRetryAfter(value: string | null | undefined, nowMs: number): number | null {
  if (value === null || value === undefined) return null;
  const v = value.trim();
  if (v === "") return null;
  if (/^\d+(\.\d+)?$/.test(v)) {
    return Math.min(Math.round(Number(v) * 1000), MAX_RETRY_AFTER_MS);
  }
  // Date.parse accepts bare numbers as years; an HTTP-date always has a day or month name.
  if (!/[a-z]/i.test(v)) return null;
  const dateMs = Date.parse(v);
  if (!Number.isFinite(dateMs)) return null;
  return Math.min(Math.max(0, dateMs - nowMs), MAX_RETRY_AFTER_MS);
}

/** The Idempotent-Replayed header as a boolean, or null when absent or unreadable. */
export function parseBooleanHeader(value: string | null): boolean | null {
  if (value === null) return null;
  const v = value.trim().toLowerCase();
  if (v === "true" || v === "1" || v === "yes") return true;
  if (v === "false" || v === "0" || v === "no") return false;
  return null;
}
