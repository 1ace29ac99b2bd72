/**
 * The rows the store hands out. Their shapes are defined once, by the SQLite schema (src/db/schema.ts);
 * the PostgreSQL schema is held to the same types by test/unit/schema-parity.test.ts.
 */
export type { TaskRow, NewTaskRow } from "../db/tasks.js";
export type { EventRow, NewEventRow, AttemptRow, NewAttemptRow } from "../db/events.js";
export type { ClientRow, NewClientRow } from "../db/clients.js";
export type { SessionRow, NewSessionRow, HourlyCount } from "../db/dashboard.js";
export type { UpstreamAccountRow } from "../db/upstream.js";
export type { EndpointHealthRow, NoticeRow, NewNoticeRow } from "../db/endpoints.js";
