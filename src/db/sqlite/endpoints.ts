import type { EndpointStore } from "../../store/store.js";
import {
  endpointsDueForNotice,
  failingEndpointsOf,
  markEndpointNoticed,
  recordEndpointFailure,
  recordEndpointSuccess,
} from "../endpoints.js";
import type { SqliteContext } from "./context.js";

/** The EndpointStore on SQLite: the health of delivery keys. */
export function sqliteEndpoints(s: SqliteContext): EndpointStore {
  const db = s.database.db;
  return {
    recordFailure: async (key, now, error) => recordEndpointFailure(db, key, now, error),
    recordSuccess: async (key, now) => recordEndpointSuccess(db, key, now),
    dueForNotice: async (before, limit) => endpointsDueForNotice(db, before, limit),
    markNoticed: async (key, failingSince, at) => markEndpointNoticed(db, key, failingSince, at),
    failingOf: async (clientId) => failingEndpointsOf(db, clientId),
  };
}
