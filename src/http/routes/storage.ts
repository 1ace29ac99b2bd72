import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { ServiceDeps } from "../../services/deps.js";
import { ApiError } from "../../services/errors.js";
import { deleteStorage, getStorage, setStorage } from "../../services/storage.js";
import type { AppEnv } from "../context.js";
import { jsonBody } from "../middleware.js";
import { errorResponses } from "../schemas.js";

const security = [{ bearerAuth: [] }];
const json = <T extends z.ZodType>(schema: T) => ({ "application/json": { schema } });
const PATH = "/openapi/v1/storage";

const StorageSchema = z
  .object({
    endpoint: z.string().openapi({ example: "https://s3.eu-west-1.amazonaws.com" }),
    bucket: z.string().openapi({ example: "my-generations" }),
    region: z.string().openapi({ example: "eu-west-1" }),
    prefix: z.string().openapi({ example: "genrelay/" }),
    access_key_id: z.string(),
    force_path_style: z.boolean(),
    public_base_url: z.string().nullable(),
    url_expires_in: z.number().int(),
  })
  .openapi("Storage");

const StorageUpdate = z
  .object({
    endpoint: z.string().openapi({ description: "The S3-compatible endpoint's origin; address-checked like a callback URL." }),
    bucket: z.string(),
    region: z.string(),
    prefix: z.string().openapi({ description: "Objects are written to <prefix><task_id>/<n><ext>." }),
    access_key_id: z.string(),
    secret_access_key: z.string().openapi({ description: "Sealed with RELAY_ENCRYPTION_KEY; never shown again." }),
    force_path_style: z.boolean().optional(),
    public_base_url: z.string().nullable().optional().openapi({ description: "When set, files[i].url is this + key instead of a presigned URL." }),
    url_expires_in: z.number().int().optional().openapi({ description: "Seconds a presigned files[i].url stays valid; default and most 604800 (7 days)." }),
  })
  .openapi("StorageUpdate");

/** PUT/GET/DELETE /openapi/v1/storage: the client's bucket for copies of outputs (DESIGN §17). */
export function registerStorageRoutes(app: OpenAPIHono<AppEnv>, deps: ServiceDeps): void {
  app.on("PUT", [PATH], ...jsonBody());

  app.openapi(
    createRoute({
      method: "get",
      path: PATH,
      tags: ["Storage"],
      summary: "Your bucket for copies of outputs (without its secret)",
      security,
      responses: { 200: { description: "The bucket", content: json(z.object({ data: StorageSchema })) }, ...errorResponses(401, 404) },
    }),
    async (c) => {
      const storage = await getStorage(deps, c.get("client").id);
      if (!storage) throw new ApiError("not_found", "No bucket is set; PUT /openapi/v1/storage sets one.");
      return c.json({ data: storage }, 200);
    },
  );

  app.openapi(
    createRoute({
      method: "put",
      path: PATH,
      tags: ["Storage"],
      summary: "Set your bucket: succeeded tasks' output files are copied into it before task.succeeded",
      description:
        "Every http(s) URL of a succeeded task's output is streamed into <prefix><task_id>/<n><ext>; the event and task reads then carry data.files. Needs RELAY_ENCRYPTION_KEY on the relay (409 encryption_key_required otherwise).",
      security,
      request: { body: { content: json(StorageUpdate), required: true } },
      responses: { 200: { description: "The bucket as stored (without its secret)", content: json(z.object({ data: StorageSchema })) }, ...errorResponses(400, 401, 409, 413, 415, 422) },
    }),
    async (c) => c.json({ data: await setStorage(deps, c.get("client").id, await c.req.json()) }, 200),
  );

  app.openapi(
    createRoute({
      method: "delete",
      path: PATH,
      tags: ["Storage"],
      summary: "Remove your bucket (copies already made stay in it)",
      security,
      responses: { 204: { description: "Removed" }, ...errorResponses(401, 404) },
    }),
    async (c) => {
      if (!(await deleteStorage(deps, c.get("client").id))) throw new ApiError("not_found", "No bucket is set.");
      return c.body(null, 204);
    },
  );
}
