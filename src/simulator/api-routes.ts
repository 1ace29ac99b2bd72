/**
 * The documented /openapi/v1/* endpoints. Handlers parse and map; the rules
 * live in validation.ts and the bookkeeping in SimulatorState.
 */
import type { Context, Hono } from "hono";
import { catalogBody } from "./catalog.js";
import type { SimEnv } from "./hono-env.js";
import { invalidRequest, SimError } from "./errors.js";
import { decodeCursor, encodeCursor, readJsonObject } from "./http-util.js";
import { canonicalJson } from "../crypto.js";
import type { SimulatorState } from "./state.js";
import { renderListItem, renderTask, TASK_STATUSES, type SimTask, type TaskStatus, type TaskType } from "./task.js";
import { validateImageRequest, validateVideoRequest } from "./validation.js";

const IDEMPOTENCY_KEY = /^[A-Za-z0-9._:-]{8,128}$/u;
const DEFAULT_LIMIT = 20;
const MAX_LIMIT = 100;

export function mountApiRoutes(app: Hono<SimEnv>, state: SimulatorState): void {
  app.use("/openapi/v1/*", async (c, next) => {
    const match = /^Bearer\s+(\S+)\s*$/iu.exec(c.req.header("authorization") ?? "");
    const account = match ? state.findAccount(match[1]!) : undefined;
    if (!account) throw new SimError(401, "invalid_api_key", "API key is missing, regenerated or revoked");
    c.set("account", account);
    await next();
  });

  app.post("/openapi/v1/images/generations", (c) => createTask(c, state, "image"));
  app.post("/openapi/v1/videos/generations", (c) => createTask(c, state, "video"));

  app.get("/openapi/v1/models", (c) => c.json(catalogBody()));

  app.get("/openapi/v1/tasks/:id", (c) => {
    const account = c.get("account");
    state.recordRead(account);
    const task = state.getTask(account, c.req.param("id"));
    return c.json(renderTask(task, state.clock.now()));
  });

  app.get("/openapi/v1/tasks", (c) => {
    const account = c.get("account");
    state.recordRead(account, "list");
    const { items, hasMore } = state.listTasks(account, parseListQuery(c));
    const now = state.clock.now();
    const last = items.at(-1);
    return c.json({
      data: items.map((t) => renderListItem(t, now)),
      next_cursor: hasMore && last ? encodeCursor(last.id) : null,
    });
  });
}

async function createTask(c: Context<SimEnv>, state: SimulatorState, type: TaskType): Promise<Response> {
  const account = c.get("account");
  state.noteCreateRequest(account);
  const key = c.req.header("idempotency-key");
  if (key === undefined || !IDEMPOTENCY_KEY.test(key)) {
    const problem = key === undefined ? "is required" : "must be 8 to 128 characters of A-Z a-z 0-9 . _ : -";
    throw invalidRequest(`Idempotency-Key header ${problem}`, [{ field: "Idempotency-Key", message: problem }]);
  }
  const body = await readJsonObject(c);
  // The endpoint is part of the request: one key cannot name an image and a video. Key order and
  // whitespace must not make "the same request" look different: compare the canonical form.
  const fingerprint = `${type}:${canonicalJson(body)}`;
  const found = state.lookupIdempotency(account, key, fingerprint);
  if (found.kind === "conflict") {
    throw new SimError(
      409,
      "idempotency_key_reused",
      "Idempotency-Key was already used for a different request; use a new key",
    );
  }
  if (found.kind === "replay") return taskResponse(c, state, found.task, 200, true);
  const request = type === "image" ? validateImageRequest(body) : validateVideoRequest(body);
  const task = state.create(account, key, fingerprint, request);
  return taskResponse(c, state, task, 201, false);
}

function taskResponse(
  c: Context<SimEnv>,
  state: SimulatorState,
  task: SimTask,
  status: 200 | 201,
  replayed: boolean,
): Response {
  c.header("Location", `${state.publicBaseUrl}/openapi/v1/tasks/${task.id}`);
  c.header("Idempotent-Replayed", String(replayed));
  // A new task is shown as created (queued) even if the real clock ticked meanwhile; a replay shows it as it is now.
  return c.json(renderTask(task, replayed ? state.clock.now() : task.createdAt), status);
}

function parseListQuery(c: Context<SimEnv>): { limit: number; afterId?: string; type?: TaskType; status?: TaskStatus } {
  const limitRaw = c.req.query("limit");
  let limit = DEFAULT_LIMIT;
  if (limitRaw !== undefined) {
    limit = /^\d{1,4}$/u.test(limitRaw) ? Number(limitRaw) : 0;
    if (limit < 1 || limit > MAX_LIMIT) {
      throw invalidRequest(`limit must be an integer from 1 to ${MAX_LIMIT}`, [
        { field: "limit", message: `must be 1 to ${MAX_LIMIT}` },
      ]);
    }
  }
  const type = c.req.query("type");
  if (type !== undefined && type !== "image" && type !== "video") {
    throw invalidRequest("type must be image or video", [{ field: "type", message: "must be image or video" }]);
  }
  const status = c.req.query("status");
  if (status !== undefined && !(TASK_STATUSES as readonly string[]).includes(status)) {
    const allowed = TASK_STATUSES.join(", ");
    throw invalidRequest(`status must be one of ${allowed}`, [
      { field: "status", message: `must be one of ${allowed}` },
    ]);
  }
  const cursor = c.req.query("cursor");
  return {
    limit,
    // An empty cursor is what some clients send for "first page".
    ...(cursor ? { afterId: decodeCursor(cursor) } : {}),
    ...(type !== undefined ? { type } : {}),
    ...(status !== undefined ? { status: status as TaskStatus } : {}),
  };
}
