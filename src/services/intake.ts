import { canonicalJson, sha256Hex } from "../crypto.js";
import { newId } from "../ids.js";
import type { NewTaskRequest } from "../store/store.js";
import type { ClientRow, TaskRow } from "../store/rows.js";
import { validateCallbackUrl } from "../net/address-guard.js";
import type { ServiceDeps } from "./deps.js";
import { ApiError } from "./errors.js";
import { DEFAULT_CALLBACK_EVENTS } from "../core/transition.js";
import { checkAgainstCatalog } from "./catalog-check.js";
import { priceOf } from "../core/credits.js";
import { reserveAtIntake } from "./credits.js";
import { priceKey } from "../core/pricing.js";
import { MEDIA_URL_PATTERN, RELAY_BODY_FIELDS } from "./intake-fields.js";
import { sealHeaders } from "../webhooks/callback-headers.js";
import { REQUEST_BOUNDS, storedBytesOf, storedRequestProblems } from "./request-bounds.js";
import { telemetry } from "../telemetry/index.js";

/** Fields the relay adds to the upstream body; they are never sent upstream. */
export const RELAY_FIELDS = RELAY_BODY_FIELDS;
const RELAY_FIELD_SET: ReadonlySet<string> = new Set(RELAY_FIELDS);

export interface CreateTaskInput {
  client: ClientRow;
  type: "image" | "video";
  /** The validated body as the caller sent it (upstream fields, unknown ones included, plus relay fields). */
  body: Record<string, unknown>;
  idempotencyKey: string;
  /** The creation's W3C `traceparent`/`tracestate` headers; an invalid one is ignored, never refused. */
  trace?: { traceparent?: string | undefined; tracestate?: string | undefined };
}

export interface CreateTaskResult {
  task: TaskRow;
  replayed: boolean;
}

/** Every media URL must be absolute https, as the upstream requires; checked here to fail fast. */
function checkMediaUrls(body: Record<string, unknown>): void {
  const problems: { field: string; message: string }[] = [];
  const check = (field: string, value: unknown) => {
    let ok = false;
    if (typeof value === "string") {
      try {
        ok = new URL(value).protocol === "https:" && MEDIA_URL_PATTERN.test(value);
      } catch {
        ok = false;
      }
    }
    if (!ok) problems.push({ field, message: "must be an absolute https URL" });
  };
  if (Array.isArray(body.image_urls)) {
    body.image_urls.forEach((u, i) => {
      check(`image_urls.${i}`, u);
    });
  }
  if (body.source_video_url !== undefined) check("source_video_url", body.source_video_url);
  if (problems.length > 0) throw new ApiError("invalid_media_url", "A media URL is not a public https URL.", problems);
}

/** What intake stores, worked out before any database access. */
interface PreparedTask {
  input: CreateTaskInput;
  callbackUrl: string | null;
  requestHash: string;
  upstreamBody: Record<string, unknown>;
  events: string[];
  metadata: Record<string, string> | undefined;
  expiresAfter: number | undefined;
  priceKey: string;
  /** The task's own callback headers, sealed (never shown again). */
  callbackHeaders: string | null;
}

function prepareTask(deps: ServiceDeps, input: CreateTaskInput): PreparedTask {
  const { body, type } = input;
  // What a task stores is bounded, every field alike (not only prompt); checked first, so nothing
  // below walks a body over the bounds.
  const oversized = storedRequestProblems(body);
  if (oversized.length > 0)
    throw new ApiError(
      "validation_error",
      "The request is over the bounds of what a task stores (see details).",
      oversized,
    );
  let callbackUrl: string | null = null;
  if (body.callback_url !== undefined && body.callback_url !== null) {
    const verdict = validateCallbackUrl(body.callback_url, {
      allowPrivateNetworks: deps.config.webhookAllowPrivateNetworks,
    });
    if (!verdict.ok) {
      throw new ApiError("invalid_callback_url", `callback_url is not acceptable: ${verdict.reason}.`, [
        { field: "callback_url", message: verdict.reason },
      ]);
    }
    callbackUrl = verdict.url;
  }
  checkMediaUrls(body);
  // Copied without the relay's fields, rather than copied whole and deleted from: a `delete` turns
  // the copy into a slow-mode object that every later walk of it (price key, JSON text) pays for.
  const upstreamBody: Record<string, unknown> = {};
  for (const field of Object.keys(body)) if (!RELAY_FIELD_SET.has(field)) upstreamBody[field] = body[field];
  // What the upstream would refuse (unknown model, a parameter the model does not support) is
  // refused here, before anything is stored, when the catalog is cached; without one the upstream decides.
  const catalog = deps.catalog?.peek(input.client.upstreamAccount) ?? null;
  const problems = catalog === null ? [] : checkAgainstCatalog(catalog, type, upstreamBody);
  if (problems.length > 0)
    throw new ApiError("validation_error", "The upstream's model catalog does not allow this request.", problems);
  return {
    input,
    callbackUrl,
    requestHash: sha256Hex(`${type}\n${canonicalJson(body)}`),
    upstreamBody,
    events: (body.callback_events as string[] | undefined) ?? DEFAULT_CALLBACK_EVENTS,
    metadata: body.metadata as Record<string, string> | undefined,
    expiresAfter: body.expires_after_seconds as number | undefined,
    priceKey: priceKey(type, upstreamBody),
    callbackHeaders: sealHeaders(
      body.callback_headers as Record<string, string> | undefined,
      deps.config.encryptionKey,
    ),
  };
}

/**
 * Callback headers travel only with webhooks: on a task with no callback_url, sent to none of the
 * client's endpoints, they would be stored and never used, the caller's catch hook never called.
 * Read only in that case, so a creation with a callback_url costs no lookup.
 */
async function requireDestination(deps: ServiceDeps, input: CreateTaskInput): Promise<void> {
  if ((await deps.store.webhookEndpoints.list(input.client.id)).length > 0) return;
  const message =
    "callback_headers are sent only with this task's webhooks, and it has nowhere to send them: add a callback_url, or subscribe an endpoint first (POST /openapi/v1/webhooks/endpoints).";
  throw new ApiError("validation_error", message, [{ field: "callback_headers", message }]);
}

/** The row to store, and the decision intake makes inside the store's transaction (caps, credit budget, stored bytes). */
function newTaskRequest(now: number, p: PreparedTask, maxClientBytes: number): NewTaskRequest {
  const { client, type, body, idempotencyKey } = p.input;
  const id = newId("task", now);
  // Kept with the task: every upstream call and delivery attempt made for it continues this trace.
  const trace = telemetry().intakeContext(p.input.trace ?? {});
  const row: NewTaskRequest["row"] = {
    id,
    clientId: client.id,
    type,
    model: String(body.model),
    status: "queued",
    phase: "waiting",
    requestJson: JSON.stringify(p.upstreamBody),
    callbackUrl: p.callbackUrl,
    callbackEvents: JSON.stringify(p.events),
    metadataJson: p.metadata ? JSON.stringify(p.metadata) : null,
    callbackHeaders: p.callbackHeaders,
    traceparent: trace?.traceparent ?? null,
    tracestate: trace?.tracestate ?? null,
    idempotencyKey,
    requestHash: p.requestHash,
    upstreamAccount: client.upstreamAccount,
    // Derived from the task id and fixed here, before any submission: every retry reuses it.
    upstreamIdempotencyKey: `genrelay-${id}`,
    priceKey: p.priceKey,
    nextRunAt: now,
    expiresAt: p.expiresAfter ? now + p.expiresAfter * 1000 : null,
    createdAt: now,
    updatedAt: now,
    storedBytes: 0,
  };
  // Counted over the row's text columns (its one number, storedBytes itself, counts nothing), then
  // set on the row: no second copy of a row of two dozen fields per creation.
  const storedBytes = storedBytesOf(row);
  if (storedBytes > REQUEST_BOUNDS.maxStoredBytes) {
    throw new ApiError(
      "payload_too_large",
      `This task would store ${storedBytes} bytes (its request, metadata, callback URL and headers); a task stores at most ${REQUEST_BOUNDS.maxStoredBytes}.`,
    );
  }
  row.storedBytes = storedBytes;
  return {
    row,
    needs: { waiting: client.maxWaiting !== null, credit: client.creditLimit !== null },
    storedBytesLimit: maxClientBytes,
    admit: (ctx) => {
      // Read where concurrent creations of the client cannot both see the same room (SQLite's one
      // writer; PostgreSQL's client_storage row lock, or its batch rolled back and decided one by one).
      if (ctx.storedBytes !== undefined && ctx.storedBytes + storedBytes > maxClientBytes) {
        throw new ApiError(
          "storage_limit",
          `Your tasks store ${ctx.storedBytes} bytes; this one (${storedBytes}) would pass your limit of ${maxClientBytes}. Finished tasks are removed after the retention period; retry then, or ask the operator for a higher CLIENT_MAX_STORED_BYTES.`,
          undefined,
          { "Retry-After": "3600" },
        );
      }
      if (client.maxWaiting !== null && ctx.waiting >= client.maxWaiting) {
        throw new ApiError(
          "concurrent_limit",
          "Too many of your tasks are waiting. Retry when some have started.",
          undefined,
          {
            "Retry-After": "5",
          },
        );
      }
      // The budget is decided in the creation's transaction: concurrent creations cannot all see the same room.
      return client.creditLimit === null
        ? 0
        : reserveAtIntake(
            ctx.position,
            priceOf(ctx.learnedPrice, type, () => p.upstreamBody),
          );
    },
  };
}

/**
 * Accepts a generation request: validates what the schema cannot, applies the caller's
 * idempotency, and stores the task (group-committed with concurrent requests where the store can).
 * A 201 is only ever sent for a committed row, so an accepted task cannot be lost.
 */
export async function createTask(deps: ServiceDeps, input: CreateTaskInput): Promise<CreateTaskResult> {
  const prepared = prepareTask(deps, input);
  if (prepared.callbackHeaders !== null && prepared.callbackUrl === null) await requireDestination(deps, input);
  const result = await deps.store.tasks.create(
    newTaskRequest(deps.clock.now(), prepared, deps.config.clientMaxStoredBytes),
  );
  if (result.replayed && result.task.requestHash !== prepared.requestHash) {
    throw new ApiError(
      "idempotency_key_reused",
      "This Idempotency-Key was already used with a different request. Use a new key for a new request.",
    );
  }
  if (!result.replayed) {
    if (deps.nudges.created) deps.nudges.created(result.task.upstreamAccount, result.task.expiresAt);
    else deps.nudges.submitter();
  }
  return result;
}
