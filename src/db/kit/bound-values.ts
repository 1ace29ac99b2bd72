import {
  checkNumber,
  checkWrittenText,
  comparedText,
  holdsNul,
  wellFormed,
  type ValueUse,
} from "../../store/values.js";

/**
 * The store's value rules (src/store/values.ts) applied where parameters are bound, on both
 * drivers alike: SQLite's statement wrapper (db/sqlite/open.ts) and PostgreSQL's connections
 * (db/pg/checked-client.ts) call `bindValues` with the statement's text. Each placeholder's use is read from the SQL once
 * per text (`planOf`): a value in an INSERT's VALUES or SELECT list or an UPDATE's SET is written;
 * one after LIMIT/OFFSET is a limit; everything else (WHERE, ON, a subquery, a function) is
 * compared. Written text with NUL is refused; compared text with NUL can equal no stored text:
 * a single value is bound as NULL (so it matches nothing, `<>` and `<` included, on both drivers),
 * an element of a list is kept out of it (SQLite binds it as is: it equals nothing there; a
 * PostgreSQL array leaves it out, or holds NULL in its place inside unnest(), where arrays pair up).
 */

type Use = ValueUse | "list" | "aligned";
interface Slot {
  use: Use;
  /** The written column, and whether an index holds it. */
  column?: string;
  key?: boolean;
}
export interface Plan {
  slots: Array<Slot | undefined>;
  named: Map<string, Slot>;
}

/**
 * The text columns each table indexes (primary keys, unique and plain indexes), by table name:
 * a written value there is held to MAX_KEY_BYTES. Each driver hands in its own, read from its
 * schema (db/sqlite/bound-values.ts, db/pg/bound-values.ts): this file reads no dialect's schema.
 */
export type KeyColumns = ReadonlyMap<string, ReadonlySet<string>>;

/** What keyColumnsOf reads of a table: drizzle's getTableConfig of either dialect. */
export interface TableShape {
  name: string;
  columns: ReadonlyArray<{ name: string; dataType: string; primary: boolean; isUnique: boolean }>;
  indexes: ReadonlyArray<{ config: { columns: readonly unknown[] } }>;
  primaryKeys: ReadonlyArray<{ columns: readonly unknown[] }>;
  uniqueConstraints: ReadonlyArray<{ columns: readonly unknown[] }>;
}

/** The key columns of a schema's tables (an index names a column by its name, whichever the dialect). */
export function keyColumnsOf(tables: readonly TableShape[]): KeyColumns {
  const out = new Map<string, Set<string>>();
  for (const table of tables) {
    const indexed = new Set<string>();
    const add = (c: unknown) => {
      if (c && typeof c === "object" && "name" in c && typeof c.name === "string") indexed.add(c.name);
    };
    for (const col of table.columns) if (col.primary || col.isUnique) add(col);
    for (const index of table.indexes) index.config.columns.forEach(add);
    for (const pk of table.primaryKeys) pk.columns.forEach(add);
    for (const u of table.uniqueConstraints) u.columns.forEach(add);
    const text = table.columns.filter((c) => c.dataType === "string" && indexed.has(c.name)).map((c) => c.name);
    out.set(table.name, new Set(text));
  }
  return out;
}

const RANK: Record<Use, number> = { compare: 0, limit: 1, list: 2, aligned: 3, write: 4 };

/** One level of parentheses while reading a statement. */
interface Frame {
  kind?: "insert" | "update" | "delete" | "select";
  mode: "write" | "compare";
  table?: string;
  /** 1: the next name is the table (after INTO or UPDATE); 2: it was, and a dot makes the next one it. */
  awaitingTable?: 0 | 1 | 2;
  columns?: string[];
  collectColumns?: string[];
  /** In VALUES (…) or an INSERT's SELECT list: which element the next value is. */
  tuple?: { columns: string[] | undefined; index: number };
  valuesNext?: boolean;
  selectList?: boolean;
  column?: string;
  /** In an UPDATE's or ON CONFLICT's SET list (this frame's, not a nested function's). */
  setList?: boolean;
  setColumnNext?: boolean;
  inNext?: boolean;
  list?: boolean;
  aligned?: boolean;
}

const TOKEN =
  /\s+|--[^\n]*|\/\*[\s\S]*?\*\/|'(?:[^']|'')*'|"((?:[^"]|"")*)"|\$(\d+)|\?(\d*)|[:@$]([A-Za-z_]\w*)|([A-Za-z_][\w$]*)|(::|.)/gy;

/**
 * Reads each placeholder's use from a statement's text (sqlite: `?`, `?NNN`, `:name`/`@name`/`$name`;
 * postgres: `$n`), a written column's key flag from `keys` (the driver's).
 */
export function planOf(sql: string, dialect: "sqlite" | "postgres", keys: KeyColumns): Plan {
  const plan: Plan = { slots: [], named: new Map() };
  const stack: Frame[] = [{ mode: "compare" }];
  let next = 0;
  let limitNext = false;
  let lastWord = "";
  const put = (slot: Slot, index: number | string) => {
    const old = typeof index === "number" ? plan.slots[index] : plan.named.get(index);
    if (old && RANK[old.use] >= RANK[slot.use]) return;
    if (typeof index === "number") plan.slots[index] = slot;
    else plan.named.set(index, slot);
  };
  TOKEN.lastIndex = 0;
  let m: RegExpExecArray | null;
  while (TOKEN.lastIndex < sql.length && (m = TOKEN.exec(sql))) {
    const [text, quoted, pgParam, qParam, named, word, punct] = m;
    const f = stack[stack.length - 1]!;
    if (text.trim() === "" || text.startsWith("--") || text.startsWith("/*") || text.startsWith("'")) continue;
    const ident = quoted !== undefined ? quoted.replaceAll('""', '"') : word;
    const param = dialect === "postgres" ? pgParam !== undefined : qParam !== undefined || named !== undefined;
    if (param) {
      const index =
        pgParam !== undefined ? Number(pgParam) - 1 : qParam ? Number(qParam) - 1 : qParam === "" ? next : named!;
      if (typeof index === "number") next = Math.max(next, index + 1);
      const use: Use = limitNext
        ? "limit"
        : f.mode === "write"
          ? "write"
          : f.list
            ? "list"
            : f.aligned
              ? "aligned"
              : "compare";
      const column = use === "write" ? (f.tuple ? f.tuple.columns?.[f.tuple.index] : f.column) : undefined;
      put(column ? { use, column, key: keys.get(f.table ?? "")?.has(column) ?? false } : { use }, index);
      limitNext = false;
      lastWord = "";
      continue;
    }
    limitNext = false;
    if (ident !== undefined) {
      const w = quoted !== undefined ? "" : ident.toLowerCase();
      if (f.collectColumns) f.collectColumns.push(ident);
      else if (f.awaitingTable === 1) {
        f.table = ident;
        f.awaitingTable = 2;
      } else if (f.setColumnNext) {
        f.column = ident;
        f.setColumnNext = false;
      } else {
        f.awaitingTable = 0;
        keyword(f, w);
      }
      if (w === "limit" || w === "offset") limitNext = true;
      lastWord = w;
      continue;
    }
    if (punct === "(") {
      const child: Frame = {
        mode: f.mode,
        table: f.table,
        column: f.column,
        list: f.inNext,
        aligned: f.aligned || lastWord === "unnest",
      };
      if (f.kind === "insert" && f.table && !f.columns && !f.valuesNext && !f.selectList) child.collectColumns = [];
      else if (f.valuesNext) child.tuple = { columns: f.columns, index: 0 };
      else if (f.tuple) child.column = f.tuple.columns?.[f.tuple.index];
      f.inNext = false;
      f.awaitingTable = 0;
      stack.push(child);
    } else if (punct === ")") {
      if (stack.length > 1) stack.pop();
      const parent = stack[stack.length - 1]!;
      if (f.collectColumns) parent.columns = f.collectColumns;
    } else if (punct === ",") {
      if (f.tuple) f.tuple.index++;
      else if (f.setList) f.setColumnNext = true;
    } else if (punct === "." && f.awaitingTable === 2) {
      f.awaitingTable = 1; // schema.table: the name after the dot is the table
    } else {
      f.awaitingTable = 0;
      f.inNext = false;
    }
    lastWord = "";
  }
  return plan;
}

/** What a keyword changes in the frame it is read in. */
function keyword(f: Frame, w: string): void {
  switch (w) {
    case "insert":
      f.kind ??= "insert";
      f.mode = "write";
      return;
    case "into":
      if (f.kind === "insert") f.awaitingTable = 1;
      return;
    case "update":
      if (f.kind === undefined) {
        f.kind = "update";
        f.awaitingTable = 1;
      }
      return;
    case "delete":
      f.kind ??= "delete";
      return;
    case "select":
      if (f.kind === "insert" && !f.selectList && f.mode === "write") {
        // INSERT … SELECT: the list is the row written, element by element.
        f.selectList = true;
        f.tuple = { columns: f.columns, index: 0 };
      } else {
        f.kind ??= "select";
        f.mode = "compare";
        f.list = false;
      }
      return;
    case "values":
      f.mode = "write";
      f.valuesNext = true;
      return;
    case "set":
      f.mode = "write";
      f.tuple = undefined;
      f.selectList = false;
      f.setList = true;
      f.setColumnNext = true;
      return;
    case "from":
      // INSERT … SELECT … FROM unnest(…): still the rows written, but no longer one column per value.
      if (f.kind === "insert") f.tuple = undefined;
      else end(f);
      return;
    case "where":
    case "having":
    case "on":
    case "join":
    case "returning":
    case "order":
    case "group":
    case "limit":
    case "offset":
      end(f);
      return;
    case "in":
      f.inNext = true;
      return;
  }
}

function end(f: Frame): void {
  f.mode = "compare";
  f.tuple = undefined;
  f.valuesNext = false;
  f.selectList = false;
  f.column = undefined;
  f.setList = false;
  f.setColumnNext = false;
}

/** A PostgreSQL array parameter: each element under the same rules; compared NUL elements are left out (or NULL where arrays pair up). */
function bindArray(values: unknown[], slot: Slot): unknown[] {
  const out: unknown[] = [];
  for (const v of values) {
    if (typeof v === "string" && slot.use !== "write" && holdsNul(v)) {
      if (slot.use === "aligned") out.push(null);
      continue;
    }
    out.push(bindOne(v, slot, "postgres"));
  }
  return out;
}

function bindOne(v: unknown, slot: Slot, dialect: "sqlite" | "postgres"): unknown {
  if (typeof v === "string") {
    if (slot.use === "write") return checkWrittenText(v, slot.column, slot.key);
    // SQLite keeps a list element as it is (it equals nothing there); a single value matches nothing as NULL.
    if (slot.use === "list" && dialect === "sqlite") return wellFormed(v);
    return comparedText(v);
  }
  if (typeof v === "number") return checkNumber(v, slot.use === "limit" ? "limit" : "write");
  if (Array.isArray(v)) return bindArray(v, slot);
  return v;
}

const COMPARE: Slot = { use: "compare" };

/** The values to bind for `plan`'s statement, under the store's rules; throws StoreValueError for a refused one. */
export function bindValues(plan: Plan, values: readonly unknown[], dialect: "sqlite" | "postgres"): unknown[] {
  const out = new Array<unknown>(values.length);
  for (let i = 0; i < values.length; i++) out[i] = bindOne(values[i], plan.slots[i] ?? COMPARE, dialect);
  return out;
}

/**
 * better-sqlite3's arguments under the rules: positional values, arrays of them, and an object of
 * named ones, in any mix (the common call, plain values only, takes the short way).
 */
export function bindSqliteArgs(plan: Plan, args: unknown[]): unknown[] {
  if (
    !args.some(
      (a) => a !== null && typeof a === "object" && (Array.isArray(a) || Object.getPrototypeOf(a) === Object.prototype),
    )
  )
    return bindValues(plan, args, "sqlite");
  const positional: unknown[] = [];
  const named: Array<Record<string, unknown>> = [];
  for (const a of args) {
    if (Array.isArray(a)) positional.push(...(a as unknown[]));
    else if (a !== null && typeof a === "object" && Object.getPrototypeOf(a) === Object.prototype) {
      named.push(
        Object.fromEntries(Object.entries(a).map(([k, v]) => [k, bindOne(v, plan.named.get(k) ?? COMPARE, "sqlite")])),
      );
    } else positional.push(a);
  }
  return [...bindValues(plan, positional, "sqlite"), ...named];
}

/** True when a statement binds nothing (no wrapper needed). */
export const bindsNothing = (plan: Plan): boolean => plan.slots.length === 0 && plan.named.size === 0;
