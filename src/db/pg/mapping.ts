import { getTableColumns } from "drizzle-orm";
import type { Table } from "drizzle-orm";
import pg from "pg";
import type { ReservationsAround } from "../../store/store.js";
import type { AttemptRow, ClientRow, EventRow, SessionRow, TaskRow, UpstreamAccountRow } from "../../store/rows.js";
import { clients, dashboardSessions, deliveryAttempts, events, tasks, upstreamAccounts } from "./schema.js";

/**
 * What the PostgreSQL driver's area files share: row mapping between the store's camelCase rows and
 * snake_case columns (named by the PostgreSQL schema, held to the same names as SQLite's by the schema-parity test), the
 * lease conditions, and the channel NOTIFY/LISTEN use.
 */

export type Row = Record<string, unknown>;
export type Queryable = pg.Pool | pg.PoolClient;

/** Column keys and names of a table of this driver's schema. */
export function columnsOf(table: Table): Array<[key: string, name: string]> {
  return Object.entries(getTableColumns(table)).map(([key, col]) => [key, col.name]);
}

/** Maps snake_case rows to the store's camelCase row types, and camelCase patches to SQL. */
export class Mapper<T> {
  private readonly toName: Map<string, string>;
  private readonly toKey: Map<string, string>;
  constructor(table: Table) {
    const cols = columnsOf(table);
    this.toName = new Map(cols);
    this.toKey = new Map(cols.map(([k, n]) => [n, k]));
  }
  row(raw: Row): T {
    const out: Row = {};
    for (const [name, value] of Object.entries(raw)) {
      const key = this.toKey.get(name);
      if (key) out[key] = value;
    }
    return out as T;
  }
  rows(raw: Row[]): T[] {
    return raw.map((r) => this.row(r));
  }
  /** `col = $n, …` for a patch, numbering from `from`; keys with undefined values are skipped. */
  set(patch: Row, from: number): { sql: string; values: unknown[] } {
    const parts: string[] = [];
    const values: unknown[] = [];
    for (const [key, value] of Object.entries(patch)) {
      if (value === undefined) continue;
      const name = this.toName.get(key);
      if (!name) throw new Error(`unknown column ${key}`);
      values.push(value);
      parts.push(`${name} = $${from + values.length - 1}`);
    }
    return { sql: parts.join(", "), values };
  }
  /** `INSERT INTO table (…) VALUES ($from, …)` for a row, numbering from `from` (1 unless it joins a statement). */
  insert(table: string, row: Row, from = 1): { sql: string; values: unknown[] } {
    const names: string[] = [];
    const values: unknown[] = [];
    for (const [key, value] of Object.entries(row)) {
      if (value === undefined) continue;
      const name = this.toName.get(key);
      if (!name) throw new Error(`unknown column ${key}`);
      names.push(name);
      values.push(value);
    }
    return {
      sql: `INSERT INTO ${table} (${names.join(", ")}) VALUES (${values.map((_, i) => `$${from + i}`).join(", ")})`,
      values,
    };
  }
}

export const T = new Mapper<TaskRow>(tasks);
export const E = new Mapper<EventRow>(events);
export const A = new Mapper<AttemptRow>(deliveryAttempts);
export const C = new Mapper<ClientRow>(clients);
export const S = new Mapper<SessionRow>(dashboardSessions);
export const U = new Mapper<UpstreamAccountRow>(upstreamAccounts);

export const UNCLAIMED = "(claimed_until IS NULL OR claimed_until < $NOW)";
export const unclaimed = (param: number) => UNCLAIMED.replace("$NOW", `$${param}`);
export const RELEASED = { claimToken: null, claimedUntil: null } as const;
export const NO_RESERVATIONS: ReservationsAround = { inFlight: 0, ahead: 0, others: 0 };
export const CHANNEL = "genrelay";
/** A submitter's wake-up by creations without a deadline: `created:` and their accounts (submitterPayload). */
const CREATED = "created:";
/** A NOTIFY payload this long at most names its accounts; a longer one is a plain wake-up. */
const CREATED_MAX = 1_000;

/**
 * The NOTIFY payload that wakes the leaders' submitters for tasks of `accounts`: `created:` and the
 * accounts (URI-encoded, space-separated) when `created` (creations without a deadline, which a
 * submitter may let pass for an account it found full: a creation cannot free a slot, and a task
 * ending wakes it anyway), else `submitter` (always heard, as is any payload not this short).
 */
export function submitterPayload(accounts: Iterable<string>, created: boolean): string {
  if (!created) return "submitter";
  const payload = CREATED + [...accounts].map(encodeURIComponent).join(" ");
  return payload.length <= CREATED_MAX ? payload : "submitter";
}

/** The accounts of a `created:` payload (submitterPayload), else null. */
export function createdAccounts(payload: string): string[] | null {
  if (!payload.startsWith(CREATED)) return null;
  const accounts = payload.slice(CREATED.length).split(" ").filter(Boolean).map(decodeURIComponent);
  return accounts.length > 0 ? accounts : null;
}
/** Advisory lock namespace of rate limits (the second key is hashtext of the client and action, see rate-limits.ts). */
export const RATE_LIMIT_LOCK_SPACE = 0x67_72_72; // "grr"

/** 64-bit integers come back as strings by default; every one the relay stores (epoch ms, counts) fits a double. */
export const types = {
  getTypeParser(oid: number, format?: string) {
    if (oid === 20) return (v: string) => Number(v);
    return pg.types.getTypeParser(oid, format as "text");
  },
} as pg.CustomTypesConfig;

export function opt<R>(m: Mapper<R>, raw: Row | undefined): R | undefined {
  return raw ? m.row(raw) : undefined;
}

const camel = (name: string) => name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
/** A camelCase key's snake_case column name. */
export const snake = (key: string) => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/** A row of a table without a Mapper (endpoint_health, notices): its snake_case names camelCased. */
export function mapRow<T>(raw: Row): T {
  const out: Row = {};
  for (const [name, value] of Object.entries(raw)) out[camel(name)] = value;
  return out as T;
}
