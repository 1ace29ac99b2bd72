import type { Context, Hono, MiddlewareHandler } from "hono";
import { ID_PATTERN } from "../../ids.js";
import { TASK_STATUSES, type TaskStatus } from "../../statuses.js";
import { dashboardTask, listDashboardTasks } from "../../services/dashboard.js";
import { ApiError } from "../../services/errors.js";
import { cancelTask } from "../../services/tasks.js";
import { findPreviews } from "./previews.js";
import { render, type DashboardDeps } from "./render.js";
import type { DashEnv } from "./session.js";
import { taskBody, tasksBody } from "./views-tasks.js";

const PAGE_SIZE = 25;
const TERMINAL = new Set(["succeeded", "failed", "canceled"]);

/** Query values that are not one of the known ones are ignored, not errors: it is a filter form. */
function filters(c: Context) {
  const status = c.req.query("status");
  const type = c.req.query("type");
  const q = (c.req.query("q") ?? "").trim().slice(0, 200);
  const before = c.req.query("before");
  return {
    status: TASK_STATUSES.includes(status as TaskStatus) ? (status as TaskStatus) : undefined,
    type: type === "image" || type === "video" ? (type as "image" | "video") : undefined,
    q: q || undefined,
    before: before && ID_PATTERN.test(before) ? before : undefined,
  };
}

export function tasksPage(deps: DashboardDeps) {
  return async (c: Context<DashEnv>) => {
    const f = filters(c);
    const { items, nextBefore } = await listDashboardTasks(deps, {
      clientId: c.get("client").id,
      limit: PAGE_SIZE,
      beforeId: f.before,
      status: f.status,
      type: f.type,
      search: f.q,
    });
    return render(c, { title: "Tasks", section: "tasks", body: tasksBody(items, f, nextBefore, deps.clock.now()) });
  };
}

const NOTICES: Record<string, string> = {
  redelivered: "The last event is queued for delivery again (same webhook-id). The new attempt appears below.",
  canceled: "The task is canceled. It was never submitted upstream, so nothing is charged.",
};

async function taskPage(deps: DashboardDeps, c: Context<DashEnv>, id: string, message?: { kind: "ok" | "error"; text: string }, status = 200) {
  const detail = await dashboardTask(deps, c.get("client").id, id);
  const previews = findPreviews(detail.task.outputJson ? JSON.parse(detail.task.outputJson) : null);
  // Keep refreshing while the task runs or a delivery is still pending.
  const moving = !TERMINAL.has(detail.task.status) || detail.delivery.status === "pending";
  return render(c, {
    title: detail.task.id,
    section: "tasks",
    body: taskBody(detail, previews, deps.clock.now(), c.get("session").csrfToken, message),
    status,
    refresh: moving,
    mediaOrigins: previews.map((p) => p.origin),
  });
}

export function registerTaskPages(app: Hono<DashEnv>, deps: DashboardDeps, auth: MiddlewareHandler<DashEnv>): void {
  app.get("/tasks/:id", auth, (c) => {
    const notice = NOTICES[c.req.query("done") ?? ""];
    return taskPage(deps, c, c.req.param("id"), notice ? { kind: "ok", text: notice } : undefined);
  });

  // Same rules as the API: the services decide, and their refusals (409 cannot_cancel, a task
  // without a callback) are shown on the task page with the API's status code.
  const action = (verb: "redeliver" | "cancel", run: (clientId: string, id: string) => unknown) =>
    app.post(`/tasks/:id/${verb}`, auth, async (c) => {
      const id = c.req.param("id");
      try {
        await run(c.get("client").id, id);
      } catch (err) {
        if (err instanceof ApiError && err.code !== "task_not_found") return taskPage(deps, c, id, { kind: "error", text: err.message }, err.status);
        throw err;
      }
      return c.redirect(`/dashboard/tasks/${encodeURIComponent(id)}?done=${verb === "cancel" ? "canceled" : "redelivered"}`, 303);
    });
  action("redeliver", (clientId, id) => deps.deliveries.redeliver(clientId, id));
  action("cancel", (clientId, id) => cancelTask(deps, clientId, id));
}
