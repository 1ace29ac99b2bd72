import { issueStreamToken } from "../../services/stream-tokens.js";
import { outputTextOf } from "../../core/stored-output.js";
import type { Context, Hono, MiddlewareHandler } from "hono";
import { ID_PATTERN } from "../../ids.js";
import { TASK_STATUSES, type TaskStatus } from "../../statuses.js";
import { TERMINAL_STATUSES } from "../../core/transition.js";
import { dashboardTask, listDashboardTasks } from "../../services/dashboard.js";
import { ApiError } from "../../services/errors.js";
import { cancelRefusal, cancelTask, requireClientTask } from "../../services/tasks.js";
import { previewsOf, shownOutput } from "./previews.js";
import { mirroredPreviews } from "./routes-storage.js";
import { render, type DashboardDeps } from "./render.js";
import type { DashEnv } from "./session.js";
import { cancelConfirmBody, taskBody, tasksBody } from "./views-tasks.js";

const PAGE_SIZE = 25;

/** Query values that are not one of the known ones are ignored, not errors: it is a filter form. */
function filters(c: Context) {
  const status = c.req.query("status");
  const type = c.req.query("type");
  // No stored text holds NUL (docs/contract.md, "Intake"), so a search for one finds nothing: dropped, never sent to the database.
  const q = (c.req.query("q") ?? "").replaceAll("\u0000", "").trim().slice(0, 200);
  const before = c.req.query("before");
  return {
    status: TASK_STATUSES.includes(status as TaskStatus) ? (status as TaskStatus) : undefined,
    type: type === "image" || type === "video" ? (type as "image" | "video") : undefined,
    q: q || undefined,
    before: before && ID_PATTERN.test(before) ? before : undefined,
    delivery: c.req.query("delivery") === "failing" ? ("failing" as const) : undefined,
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
      deliveryFailing: f.delivery === "failing",
    });
    return render(c, deps, {
      title: "Tasks",
      section: "tasks",
      body: tasksBody(items, f, nextBefore, deps.clock.now()),
    });
  };
}

const NOTICES: Record<string, string> = {
  redelivered: "The last event is queued for delivery again (same webhook-id). The new attempt appears below.",
  canceled: "The task is canceled. It was never submitted upstream, so nothing is charged.",
};

async function taskPage(
  deps: DashboardDeps,
  c: Context<DashEnv>,
  id: string,
  message?: { kind: "ok" | "error"; text: string },
  status = 200,
) {
  const detail = await dashboardTask(deps, c.get("client").id, id);
  // Copies in the client's bucket, served by the relay, come first: the upstream's URLs expire.
  const output = shownOutput(await outputTextOf(detail.task, deps.store.outputs));
  const previews = mirroredPreviews(detail.task) ?? previewsOf(output);
  // Keep refreshing while the task runs or a delivery is still pending.
  const moving = !TERMINAL_STATUSES.has(detail.task.status) || detail.delivery.status === "pending";
  // A task still running is followed live: its event stream, read with a token for it alone.
  const stream =
    deps.streams && !TERMINAL_STATUSES.has(detail.task.status)
      ? `/openapi/v1/tasks/${id}/events?token=${(await issueStreamToken(deps, c.get("client"), id)).token}`
      : undefined;
  return render(c, deps, {
    ...(stream ? { stream } : {}),
    title: detail.task.id,
    section: "tasks",
    body: taskBody(detail, output, previews, deps.clock.now(), c.get("session").csrfToken, message),
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

  // Cancel asks first, on a page of its own (no script needed); a task that can no longer be
  // canceled gets the API's refusal on its task page instead.
  app.get("/tasks/:id/cancel", auth, async (c) => {
    const task = await requireClientTask(deps, c.get("client").id, c.req.param("id"));
    const refusal = cancelRefusal(task, deps.clock.now());
    if (refusal !== null) return taskPage(deps, c, task.id, { kind: "error", text: refusal }, 409);
    return render(c, deps, {
      title: `Cancel ${task.id}`,
      section: "tasks",
      body: cancelConfirmBody(task, c.get("session").csrfToken),
    });
  });

  // Same rules as the API: the services decide, and their refusals (409 cannot_cancel, a task
  // without a callback) are shown on the task page with the API's status code.
  const action = (verb: "redeliver" | "cancel", run: (c: Context<DashEnv>, id: string) => Promise<Response | null>) =>
    app.post(`/tasks/:id/${verb}`, auth, async (c) => {
      const id = c.req.param("id");
      try {
        const instead = await run(c, id);
        if (instead) return instead;
      } catch (err) {
        if (err instanceof ApiError && err.code !== "task_not_found")
          return taskPage(deps, c, id, { kind: "error", text: err.message }, err.status);
        throw err;
      }
      return c.redirect(
        `/dashboard/tasks/${encodeURIComponent(id)}?done=${verb === "cancel" ? "canceled" : "redelivered"}`,
        303,
      );
    });
  action("redeliver", async (c, id) => {
    await deps.deliveries.redeliver(c.get("client").id, id);
    return null;
  });
  action("cancel", async (c, id) => {
    // Only the confirm page's form says yes; any other POST (an old form, a bare request) asks first.
    if ((await c.req.parseBody()).confirm !== "yes")
      return c.redirect(`/dashboard/tasks/${encodeURIComponent(id)}/cancel`, 303);
    await cancelTask(deps, c.get("client").id, id);
    return null;
  });
}
