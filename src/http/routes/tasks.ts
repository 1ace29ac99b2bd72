import type { OpenAPIHono } from "@hono/zod-openapi";
import type { ServiceDeps } from "../../services/deps.js";
import { cancelTask, getTaskView, listTaskViews } from "../../services/tasks.js";
import type { AppEnv } from "../context.js";
import { apiRoute } from "../schema-rules.js";
import { errorResponses, TaskIdParam, TaskListQuery, TaskListSchema, TaskViewSchema } from "../schemas.js";

const security = [{ bearerAuth: [] }];
const taskJson = { "application/json": { schema: TaskViewSchema } };

export function registerTaskRoutes(app: OpenAPIHono<AppEnv>, deps: ServiceDeps): void {
  app.openapi(
    apiRoute({
      method: "get",
      path: "/openapi/v1/tasks/{id}",
      operationId: "getTask",
      tags: ["Tasks"],
      summary: "Read a task",
      security,
      request: { params: TaskIdParam },
      responses: { 200: { description: "The task", content: taskJson }, ...errorResponses(400, 401, 404) },
    }),
    async (c) => c.json(await getTaskView(deps, c.get("client").id, c.req.valid("param").id), 200),
  );

  app.openapi(
    apiRoute({
      method: "get",
      path: "/openapi/v1/tasks",
      operationId: "listTasks",
      tags: ["Tasks"],
      summary: "List your tasks, newest first",
      security,
      request: { query: TaskListQuery },
      responses: {
        200: { description: "A page of tasks", content: { "application/json": { schema: TaskListSchema } } },
        ...errorResponses(400, 401),
      },
    }),
    async (c) => c.json(await listTaskViews(deps, c.get("client").id, c.req.valid("query")), 200),
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
      security,
      request: { params: TaskIdParam },
      responses: {
        200: { description: "The canceled task", content: taskJson },
        ...errorResponses(400, 401, 404, 409),
      },
    }),
    async (c) => c.json(await cancelTask(deps, c.get("client").id, c.req.valid("param").id), 200),
  );
}
