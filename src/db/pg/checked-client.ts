import pg from "pg";
import { bindValues, type Plan } from "../kit/bound-values.js";
import { planOf } from "./bound-values.js";

/**
 * PostgreSQL's side of the store's value rules (src/db/kit/bound-values.ts): every statement's values
 * are bound under them, on the pool (before a connection is taken, so a refused value costs none)
 * and on every connection (transactions), the same rules SQLite's statement wrapper applies.
 */

/** Plans by statement text; multi-row INSERTs of varying width make some texts one-off, hence a bound. */
const plans = new Map<string, Plan>();
const PLANS_KEPT = 500;
/** Value arrays already bound (by the pool, then seen again by its connection). */
const bound = new WeakSet<unknown[]>();

function planFor(sql: string): Plan {
  let plan = plans.get(sql);
  if (!plan) {
    plan = planOf(sql);
    if (plans.size >= PLANS_KEPT) plans.delete(plans.keys().next().value!);
    plans.set(sql, plan);
  }
  return plan;
}

/** `values` for `sql` under the rules; throws StoreValueError for a value the store refuses. */
export function bindPg(sql: string, values: unknown[]): unknown[] {
  if (values.length === 0 || bound.has(values)) return values;
  const out = bindValues(planFor(sql), values, "postgres");
  bound.add(out);
  return out;
}

type Query = (...args: unknown[]) => unknown;

/** A query call's arguments with their values bound; a refusal answers the way the call expects (its callback, or a rejected promise). */
export function checkedQuery(native: Query, self: unknown, args: unknown[]): unknown {
  const [first, second] = args;
  try {
    if (typeof first === "string" && Array.isArray(second)) args[1] = bindPg(first, second);
    else if (
      first !== null &&
      typeof first === "object" &&
      typeof (first as pg.QueryConfig).text === "string" &&
      Array.isArray((first as pg.QueryConfig).values)
    ) {
      args[0] = { ...first, values: bindPg((first as pg.QueryConfig).text, (first as pg.QueryConfig).values!) };
    }
  } catch (err) {
    const callback = args.find((a) => typeof a === "function") as ((e: unknown) => void) | undefined;
    if (!callback) return Promise.reject(err);
    process.nextTick(() => callback(err));
    return undefined;
  }
  return native.apply(self, args);
}

/** The pool's connection class: every query, transactions included, binds under the rules. */
export class CheckedClient extends pg.Client {
  override query(...args: unknown[]): never {
    return checkedQuery(super.query as Query, this, args) as never;
  }
}

/** Checks a pool's own `query` before it takes a connection for it. */
export function checkPoolQueries(pool: pg.Pool): void {
  const native = pool.query as Query;
  (pool as unknown as { query: Query }).query = (...args: unknown[]) => checkedQuery(native, pool, args);
}
