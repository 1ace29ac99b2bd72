import { z, type OpenAPIHono } from "@hono/zod-openapi";
import type { ServiceDeps } from "../../services/deps.js";
import { ApiError } from "../../services/errors.js";
import { deleteStorage, getStorage, setStorage, StorageInput } from "../../services/storage.js";
import { MAX_URL_EXPIRES_IN } from "../../mirror/bucket.js";
import type { AppEnv } from "../context.js";
import { apiRoute } from "../schema-rules.js";
import { apiKeySecurity, json, errorResponses, ORIGIN_PATTERN, ownBody } from "../schemas.js";

const PATH = "/openapi/v1/storage";
/** services/storage.ts's prefix rule, as a pattern: no leading /, no . or .. segment, no control character or backslash. */
const PREFIX_PATTERN = "^(?!/)(?!(?:[^/]*/)*\\.\\.?(?:/|$))[^\\u0000-\\u001f\\u007f\\\\]*$";

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

/**
 * The body PUT takes: the very fields the service parses (services/storage.ts, StorageInput), closed
 * like every body, with what its refinements and address checks decide said in the document. zod's
 * own `.meta()`, which the generator reads too: the service's schemas may be built before
 * @hono/zod-openapi adds `.openapi()` to zod.
 */
const input = StorageInput.shape;
const StorageUpdate = ownBody({
  ...input,
  endpoint: input.endpoint.meta({
    format: "uri",
    pattern: ORIGIN_PATTERN,
    example: "https://s3.eu-west-1.amazonaws.com",
    description:
      "The S3-compatible endpoint's origin (no path or query), address-checked like a callback URL: https and a public host; http and private hosts only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development).",
  }),
  bucket: input.bucket.meta({ example: "my-generations" }),
  region: input.region.meta({ example: "eu-west-1" }),
  prefix: input.prefix.meta({
    pattern: PREFIX_PATTERN,
    example: "genrelay/",
    description:
      "Objects are written to <prefix><task_id>/<n><ext>. No leading /, no . or .. segment, no control character or backslash.",
  }),
  secret_access_key: input.secret_access_key.meta({
    description: "Sealed with RELAY_ENCRYPTION_KEY; never shown again.",
  }),
  public_base_url: input.public_base_url.meta({
    format: "uri",
    pattern: "^https?://[^?#@]*$",
    description:
      "When set, files[i].url is this + key instead of a presigned URL: an absolute http(s) URL without credentials, a query or a fragment (not even an empty ? or #).",
  }),
  url_expires_in: input.url_expires_in.meta({
    description: `Seconds a presigned files[i].url stays valid; default and most ${MAX_URL_EXPIRES_IN} (7 days).`,
  }),
}).openapi("StorageUpdate");

/** PUT/GET/DELETE /openapi/v1/storage: the client's bucket for copies of outputs (docs/contract.md, "Outputs"). */
export function registerStorageRoutes(app: OpenAPIHono<AppEnv>, deps: ServiceDeps): void {
  app.openapi(
    apiRoute({
      method: "get",
      path: PATH,
      operationId: "getStorage",
      tags: ["Storage"],
      summary: "Your bucket for copies of outputs (without its secret)",
      security: apiKeySecurity,
      responses: {
        200: { description: "The bucket", content: json(z.object({ data: StorageSchema })) },
        ...errorResponses(401, 404),
      },
    }),
    async (c) => {
      const storage = await getStorage(deps, c.get("client").id);
      if (!storage) throw new ApiError("not_found", "No bucket is set; PUT /openapi/v1/storage sets one.");
      return c.json({ data: storage }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "put",
      path: PATH,
      operationId: "setStorage",
      tags: ["Storage"],
      summary: "Set your bucket: succeeded tasks' output files are copied into it before task.succeeded",
      description:
        "Every http(s) URL of a succeeded task's output is streamed into <prefix><task_id>/<n><ext>; the event and task reads then carry data.files. Needs RELAY_ENCRYPTION_KEY on the relay (409 encryption_key_required otherwise).",
      security: apiKeySecurity,
      request: { body: { content: json(StorageUpdate), required: true } },
      responses: {
        200: {
          description: "The bucket as stored (without its secret)",
          content: json(z.object({ data: StorageSchema })),
        },
        ...errorResponses(400, 401, 409, 413, 415, 422),
      },
    }),
    async (c) => c.json({ data: await setStorage(deps, c.get("client").id, await c.req.json()) }, 200),
  );

  app.openapi(
    apiRoute({
      method: "delete",
      path: PATH,
      operationId: "deleteStorage",
      tags: ["Storage"],
      summary: "Remove your bucket (copies already made stay in it)",
      security: apiKeySecurity,
      responses: { 204: { description: "Removed" }, ...errorResponses(401, 404) },
    }),
    async (c) => {
      if (!(await deleteStorage(deps, c.get("client").id))) throw new ApiError("not_found", "No bucket is set.");
      return c.body(null, 204);
    },
  );
}
