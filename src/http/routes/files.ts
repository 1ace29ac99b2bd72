import { z, type OpenAPIHono } from "@hono/zod-openapi";
import { LINK_TOKEN_PATTERN, LINK_URL_EXPIRES_IN } from "../../mirror/links.js";
import { fileLinkTarget } from "../../services/copies.js";
import { FileLinkCache, LINK_URL_MIN_LEFT_MS } from "../../services/files.js";
import type { ServiceDeps } from "../../services/deps.js";
import type { AppEnv } from "../context.js";
import { apiRoute, headerRefs } from "../schema-rules.js";
import { errorResponses } from "../schemas.js";

const notFound = errorResponses(404)[404]!;

/**
 * GET (and HEAD) /files/{token}: a mirrored file's lasting link (docs/contract.md, "Links that
 * last"). No API key: the token is the capability, and names one file. It redirects to a
 * short-lived presigned URL, so the link works for as long as the file is kept, whatever the
 * presigned URLs' 7-day limit. The answer is never stored by a cache outside the relay; inside it,
 * FileLinkCache (services/files.ts) keeps what makes a redirect cost, and forgets it when the
 * client changes, so a removed bucket or a revocation ends the link at once, and so does a pruned task.
 */
export function registerFileRoutes(app: OpenAPIHono<AppEnv>, deps: ServiceDeps): void {
  const cache = new FileLinkCache(deps);
  app.openapi(
    apiRoute({
      method: "get",
      path: "/files/{token}",
      operationId: "getFileLink",
      tags: ["Storage"],
      summary: "A copied file's lasting link: redirects to a fresh URL of the copy (no API key)",
      description: `The link in data.files[i].link (PUBLIC_BASE_URL set on the relay, a bucket set by the client). Answers 302 to a URL of the copy presigned for ${LINK_URL_EXPIRES_IN / 60} minutes (or the bucket's public_base_url + key), reused while at least ${LINK_URL_MIN_LEFT_MS / 60_000} minutes of it are left, for as long as the file is kept: 404 once the task is pruned (TASK_RETENTION_DAYS) or the client's bucket is removed or replaced by another. HEAD answers the same without a body.`,
      security: [],
      request: {
        params: z.object({
          token: z.string().openapi({
            param: { name: "token", in: "path" },
            pattern: LINK_TOKEN_PATTERN,
            description: "The file's token, as in its link: unguessable, one per file.",
          }),
        }),
      },
      responses: {
        302: {
          description: "The copy is kept: follow Location to it",
          headers: headerRefs("Location", "Cache-Control"),
        },
        404: {
          ...notFound,
          description:
            "No such link, or its file is no longer kept: the task was pruned, or the client's bucket removed (not_found)",
        },
        ...errorResponses(),
      },
    }),
    async (c) => {
      const location = await fileLinkTarget(deps, c.req.valid("param").token, { cache });
      // Never stored by a cache: the next request must see a removed bucket, and get a fresh URL.
      return c.body(null, 302, { Location: location, "Cache-Control": "no-store", "Referrer-Policy": "no-referrer" });
    },
  );
  // HEAD is served by the GET route (hono answers HEAD with GET's handler, without the body); it is
  // documented as its own operation so clients that check a link before following it see it promised.
  app.openAPIRegistry.registerPath(
    apiRoute({
      method: "head",
      path: "/files/{token}",
      operationId: "headFileLink",
      tags: ["Storage"],
      summary: "Check a copied file's lasting link: GET's answer without a body (no API key)",
      security: [],
      request: {
        params: z.object({
          token: z.string().openapi({ param: { name: "token", in: "path" }, pattern: LINK_TOKEN_PATTERN }),
        }),
      },
      responses: {
        302: {
          description: "The copy is kept: Location is a fresh URL of it",
          headers: headerRefs("Location", "Cache-Control"),
        },
        404: { description: "No such link, or its file is no longer kept (no body)" },
      },
    }),
  );
}
