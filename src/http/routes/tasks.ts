import { z, type OpenAPIHono } from "@hono/zod-openapi";
import type { ServiceDeps } from "../../services/deps.js";
import { changedFrom, holdFor, waitForTask, waitPreference } from "../../services/task-wait.js";
import { cancelTask, getTaskView, listTaskViews, viewOf } from "../../services/tasks.js";
import type { AppEnv } from "../context.js";
import { jsonAnswer } from "../json-answer.js";
import { apiRoute, headerRefs } from "../schema-rules.js";
import {
  apiKeySecurity,
  errorResponses,
  PreferHeader,
  TaskIdParam,
  TaskListQuery,
  TaskListSchema,
  TaskReadQuery,
  TaskViewSchema,
} from "../schemas.js";

const taskJson = { "application/json": { schema: TaskViewSchema } };

export function registerTaskRoutes(app: OpenAPIHono<AppEnv>, deps: ServiceDeps): void {
  app.openapi(
    apiRoute({
      method: "get",
      path: "/openapi/v1/tasks/{id}",
      operationId: "getTask",
      tags: ["Tasks"],
      summary: "Read a task",
      description:
        "With Prefer: wait=N the answer waits until the task ends or its status differs from ?status=, or N seconds pass.",
      security: apiKeySecurity,
      request: { params: TaskIdParam, query: TaskReadQuery, headers: z.object({ Prefer: PreferHeader }) },
      responses: {
        200: { description: "The task", headers: headerRefs("Preference-Applied"), content: taskJson },
        ...errorResponses(400, 401, 404, 429),
      },
    }),
    async (c) => {
      const clientId = c.get("client").id;
      const { id } = c.req.valid("param");
      const wait = deps.waiters ? waitPreference(c.req.valid("header").Prefer) : null;
      if (wait === null || !deps.waiters) return jsonAnswer(c, await getTaskView(deps, clientId, id), 200);
      const hold = await holdFor(deps, deps.waiters, clientId, wait);
      const task = await waitForTask(
        deps,
        hold,
        clientId,
        id,
        changedFrom(c.req.valid("query").status),
        c.req.raw.signal,
      );
      c.header("Preference-Applied", `wait=${wait}`);
      return jsonAnswer(c, await viewOf(deps, task), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get",
      path: "/openapi/v1/tasks",
      operationId: "listTasks",
      tags: ["Tasks"],
      summary: "List your tasks, newest first",
      security: apiKeySecurity,
      request: { query: TaskListQuery },
      responses: {
        200: { description: "A page of tasks", content: { "application/json": { schema: TaskListSchema } } },
        ...errorResponses(400, 401),
      },
    }),
    async (c) => jsonAnswer(c, await listTaskViews(deps, c.get("client").id, c.req.valid("query")), 200),
  );

  app.openapi(
    apiRoute({
      method: "post",
      path: "/openapi/v1/tasks/{id}/cancel",
      operationId: "cancelTask",
      tags: ["Tasks"],
      summary: "Cancel a task not yet submitted upstream",
      description:
        "A task still waiting in the relay becomes canceled and is never charged. Once submitted, the upstream has no cancel: 409 cannot_cancel.",
      security: apiKeySecurity,
      request: { params: TaskIdParam },
      responses: {
        200: { description: "The canceled task", content: taskJson },
        ...errorResponses(400, 401, 404, 409),
      },
    }),
    async (c) => jsonAnswer(c, await cancelTask(deps, c.get("client").id, c.req.valid("param").id), 200),
  );
}
