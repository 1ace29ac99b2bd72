import { TASK_STATUSES, type TaskStatus } from "../statuses.js";
import type { AttemptRow, ClientRow, EventRow, TaskRow } from "../store/rows.js";
import { outputTextOf } from "../core/stored-output.js";
import { iso, out, parse, positionalsAtMost, UsageError, wholeNumber } from "./common.js";
import { cliLifecycle, type CliContext } from "./context.js";
import { ApiError } from "../services/errors.js";
import { cancelWaitingTask } from "../services/tasks.js";

function json(text: string | null): unknown {
  if (text === null) return null;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

/**
 * What support sees of a task: the relay's own bookkeeping beside the public fields. Built field by
 * field from the row (never spread), so a column added later cannot leak into the output unseen.
 */
function taskFields(t: TaskRow) {
  return {
    id: t.id,
    client_id: t.clientId,
    type: t.type,
    model: t.model,
    status: t.status,
    phase: t.phase,
    created_at: iso(t.createdAt),
    updated_at: iso(t.updatedAt),
    submitted_at: iso(t.submittedAt),
    completed_at: iso(t.completedAt),
    expires_at: iso(t.expiresAt),
    idempotency_key: t.idempotencyKey,
    upstream_account: t.upstreamAccount,
    upstream_task_id: t.upstreamTaskId,
    upstream_idempotency_key: t.upstreamIdempotencyKey,
    submit_attempts: t.submitAttempts,
    poll_count: t.pollCount,
    next_run_at: iso(t.nextRunAt),
    lease: t.claimToken === null ? null : { token: t.claimToken, until: iso(t.claimedUntil) },
    callback: { url: t.callbackUrl, events: json(t.callbackEvents) },
    metadata: json(t.metadataJson),
    error: json(t.errorJson),
    usage: { points_charged: t.pointsCharged, points_refunded: t.pointsRefunded },
    output: json(t.outputJson),
    request: json(t.requestJson),
  };
}

function eventFields(e: EventRow) {
  return {
    id: e.id,
    type: e.type,
    sequence: e.sequence,
    created_at: iso(e.createdAt),
    callback_url: e.callbackUrl,
    delivery_status: e.deliveryStatus,
    attempts: e.attempts,
    next_attempt_at: iso(e.nextAttemptAt),
    last_attempt_at: iso(e.lastAttemptAt),
    last_status_code: e.lastStatusCode,
    last_error: e.lastError,
    delivered_at: iso(e.deliveredAt),
    failed_at: iso(e.failedAt),
  };
}

function attemptFields(a: AttemptRow) {
  return {
    id: a.id,
    event_id: a.eventId,
    event_type: a.eventType,
    url: a.url,
    attempted_at: iso(a.attemptedAt),
    outcome: a.outcome,
    status_code: a.statusCode,
    latency_ms: a.latencyMs,
    error: a.error,
    response_body: a.responseBody,
  };
}

function statusArg(value: string | undefined): TaskStatus | undefined {
  if (value === undefined) return undefined;
  if (!(TASK_STATUSES as readonly string[]).includes(value))
    throw new UsageError(`--status must be one of ${TASK_STATUSES.join(", ")}`);
  return value as TaskStatus;
}

async function list(args: string[], ctx: CliContext): Promise<number> {
  const { values, positionals } = parse(args, {
    client: { type: "string" },
    status: { type: "string" },
    limit: { type: "string" },
    json: { type: "boolean" },
  });
  positionalsAtMost(positionals, 0, "tasks list");
  const status = statusArg(values.status);
  const limit = wholeNumber(values.limit, "limit", { min: 1, max: 1000 }) ?? 20;
  const store = await ctx.store({ mustExist: true });
  if (values.client !== undefined && !(await store.clients.find(values.client)))
    throw new UsageError(`no client ${values.client}`);
  const rows = await store.tasks.listForSupport({ clientId: values.client, status, limit });
  const last = await store.events.lastOfTasks(rows.map((t) => t.id));
  const items = rows.map((t) => {
    const event = last.get(t.id);
    return {
      id: t.id,
      client_id: t.clientId,
      type: t.type,
      model: t.model,
      status: t.status,
      phase: t.phase,
      upstream_task_id: t.upstreamTaskId,
      created_at: iso(t.createdAt),
      completed_at: iso(t.completedAt),
      delivery: event ? event.deliveryStatus : "none",
    };
  });
  if (values.json) {
    out(JSON.stringify(items));
    return 0;
  }
  if (items.length === 0) {
    out("no tasks match");
    return 0;
  }
  out(
    [
      "TASK".padEnd(31),
      "STATUS".padEnd(10),
      "TYPE ",
      "DELIVERY ",
      "CREATED".padEnd(24),
      "CLIENT".padEnd(30),
      "MODEL",
      "UPSTREAM",
    ].join(" "),
  );
  for (const i of items) {
    out(
      [
        i.id.padEnd(31),
        i.status.padEnd(10),
        i.type.padEnd(5),
        i.delivery.padEnd(9),
        i.created_at!.padEnd(24),
        i.client_id.padEnd(30),
        i.model,
        i.upstream_task_id ?? "-",
      ].join(" "),
    );
  }
  return 0;
}

function showHuman(client: ClientRow | undefined, t: TaskRow, events: EventRow[], attempts: AttemptRow[]): void {
  const f = taskFields(t);
  const line = (label: string, value: unknown) =>
    out(
      `${label.padEnd(18)}${value === null || value === undefined ? "-" : typeof value === "string" ? value : JSON.stringify(value)}`,
    );
  line("task", f.id);
  line("client", `${f.client_id}${client ? ` (${client.name})` : ""}`);
  line("type / model", `${f.type} / ${f.model}`);
  line("status", `${f.status} (phase ${f.phase})`);
  line("created", f.created_at);
  line("updated", f.updated_at);
  line("submitted", f.submitted_at);
  line("completed", f.completed_at);
  if (f.expires_at) line("expires", f.expires_at);
  line("idempotency key", f.idempotency_key);
  line("upstream account", f.upstream_account);
  line("upstream task", f.upstream_task_id);
  line("upstream idem key", f.upstream_idempotency_key);
  line("submit attempts", f.submit_attempts);
  line("polls", f.poll_count);
  line("next run", f.next_run_at);
  line("lease", f.lease ? `${f.lease.token} until ${f.lease.until}` : null);
  line("callback", f.callback.url ? `${f.callback.url} ${JSON.stringify(f.callback.events)}` : null);
  line("metadata", f.metadata);
  line("error", f.error);
  line("usage", `charged ${f.usage.points_charged ?? "-"}, refunded ${f.usage.points_refunded ?? "-"}`);
  line("output", f.output);
  line("request", f.request);
  out("");
  out(`events (${events.length})`);
  for (const e of events) {
    const when =
      e.deliveryStatus === "pending" && e.nextAttemptAt !== null ? `, next attempt ${iso(e.nextAttemptAt)}` : "";
    const last =
      e.lastAttemptAt !== null ? `, last ${iso(e.lastAttemptAt)} → ${e.lastStatusCode ?? e.lastError ?? "?"}` : "";
    out(`  #${e.sequence} ${e.id} ${e.type}  delivery ${e.deliveryStatus}, ${e.attempts} attempt(s)${last}${when}`);
  }
  out("");
  out(`delivery attempts (${attempts.length})`);
  for (const a of attempts) {
    const detail = a.error ? `  ${a.error}` : "";
    out(
      `  ${iso(a.attemptedAt)} ${a.eventType} ${a.outcome} ${a.statusCode ?? "-"} ${a.latencyMs ?? "-"} ms  ${a.url}${detail}`,
    );
  }
}

async function show(args: string[], ctx: CliContext): Promise<number> {
  const { values, positionals } = parse(args, { json: { type: "boolean" } });
  const id = positionals[0];
  if (!id) throw new UsageError("tasks show needs a task id (relay or upstream)");
  positionalsAtMost(positionals, 1, "tasks show");
  const store = await ctx.store({ mustExist: true });
  const matches = await store.tasks.findByAnyId(id);
  if (matches.length === 0) throw new UsageError(`no task ${id} (neither a relay nor an upstream task id)`);
  if (matches.length > 1) {
    throw new UsageError(
      `${matches.length} tasks have upstream id ${id} (on different upstream accounts): ${matches.map((t) => t.id).join(", ")}; show one by its relay id`,
    );
  }
  // An output kept in pieces (core/stored-output.ts) is shown whole, as one stored in the row.
  const task = { ...matches[0]!, outputJson: await outputTextOf(matches[0]!, store.outputs) };
  const events = await store.events.ofTask(task.id);
  const attempts = await store.events.attemptsOfTask(task.id);
  const client = await store.clients.find(task.clientId);
  if (values.json) {
    out(
      JSON.stringify({
        ...taskFields(task),
        client_name: client?.name ?? null,
        events: events.map(eventFields),
        attempts: attempts.map(attemptFields),
      }),
    );
  } else {
    showHuman(client, task, events, attempts);
  }
  return 0;
}

async function cancel(args: string[], ctx: CliContext): Promise<number> {
  const { positionals } = parse(args, {});
  const id = positionals[0];
  if (!id) throw new UsageError("tasks cancel needs a relay task id");
  positionalsAtMost(positionals, 1, "tasks cancel");
  const store = await ctx.store({ mustExist: true });
  try {
    const task = await cancelWaitingTask({ lifecycle: cliLifecycle(store, ctx) }, null, id);
    out(`canceled ${task.id} (client ${task.clientId}): it was never submitted upstream and is not charged`);
    return 0;
  } catch (err) {
    if (err instanceof ApiError)
      throw new UsageError(err.code === "task_not_found" ? `no task ${id}` : `cannot cancel ${id}: ${err.message}`);
    throw err;
  }
}

/** `tasks <sub>`: list, show, cancel. */
export async function runTasks(sub: string, args: string[], ctx: CliContext): Promise<number> {
  switch (sub) {
    case "cancel":
      return cancel(args, ctx);
    case "list":
      return list(args, ctx);
    case "show":
      return show(args, ctx);
    default:
      throw new UsageError(`unknown command: tasks ${sub}`);
  }
}
