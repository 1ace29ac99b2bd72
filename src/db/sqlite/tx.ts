import type { Db } from "./open.js";

/** A drizzle transaction handle; repository functions accept it wherever they accept the database. */
export type Tx = Parameters<Parameters<Db["transaction"]>[0]>[0];
export type DbOrTx = Db | Tx;
