import { readFileSync } from "node:fs";
import { ApiError, type FieldProblem } from "../services/errors.js";
import { deleteStorage, getStorage, setStorage } from "../services/storage.js";
import type { StorageView } from "../mirror/stored-bucket.js";
import { out, parse, positionalsAtMost, UsageError, wholeNumber } from "./common.js";
import type { CliContext } from "./context.js";

function show(view: StorageView): string {
  return `${view.endpoint} bucket=${view.bucket} region=${view.region} prefix=${JSON.stringify(view.prefix)} access_key_id=${view.access_key_id} path_style=${view.force_path_style} ${
    view.public_base_url ? `public_base_url=${view.public_base_url}` : `url_expires_in=${view.url_expires_in}s`
  }`;
}

/** The secret access key, from an environment variable or standard input: never from the command line (shell history, ps). */
function readSecret(
  values: { "secret-key-env"?: string | undefined; "secret-key-stdin"?: boolean | undefined },
  env: NodeJS.ProcessEnv,
): string {
  if (values["secret-key-env"]) {
    const key = env[values["secret-key-env"]];
    if (!key) throw new UsageError(`environment variable ${values["secret-key-env"]} is empty or unset`);
    return key.trim();
  }
  if (values["secret-key-stdin"]) {
    const key = readFileSync(0, "utf8").trim();
    if (!key) throw new UsageError("no secret access key on standard input");
    return key;
  }
  throw new UsageError("clients storage needs --secret-key-env VAR or --secret-key-stdin to set a bucket");
}

/**
 * `clients storage ID`: shows, sets (`--endpoint …`) or removes (`--clear`) the client's bucket for
 * copies of outputs (docs/contract.md, "Outputs"), through the same service as PUT/GET/DELETE /openapi/v1/storage.
 */
export async function runClientStorage(args: string[], ctx: CliContext): Promise<number> {
  const { values, positionals } = parse(args, {
    json: { type: "boolean" },
    clear: { type: "boolean" },
    endpoint: { type: "string" },
    bucket: { type: "string" },
    region: { type: "string" },
    prefix: { type: "string" },
    "access-key-id": { type: "string" },
    "secret-key-env": { type: "string" },
    "secret-key-stdin": { type: "boolean" },
    "force-path-style": { type: "boolean" },
    "public-base-url": { type: "string" },
    "url-expires-in": { type: "string" },
  });
  const id = positionals[0];
  if (!id) throw new UsageError("clients storage needs a client id");
  positionalsAtMost(positionals, 1, "clients storage");
  const store = await ctx.store();
  if (!(await store.clients.find(id))) throw new UsageError(`no client ${id}`);

  if (values.clear) {
    const removed = await deleteStorage({ store }, id);
    out(removed ? `removed the bucket of ${id}; copies already made stay in it` : `${id} has no bucket`);
    return 0;
  }
  if (values.endpoint === undefined) {
    const view = await getStorage({ store }, id);
    if (values.json) out(JSON.stringify(view));
    else out(view ? show(view) : `${id} has no bucket`);
    return 0;
  }
  const input = {
    endpoint: values.endpoint,
    bucket: values.bucket,
    region: values.region,
    prefix: values.prefix ?? "",
    access_key_id: values["access-key-id"],
    secret_access_key: readSecret(values, ctx.env),
    force_path_style: values["force-path-style"] ?? false,
    ...(values["public-base-url"] !== undefined ? { public_base_url: values["public-base-url"] } : {}),
    ...(values["url-expires-in"] !== undefined
      ? { url_expires_in: wholeNumber(values["url-expires-in"], "url-expires-in", { min: 1, max: 604_800 }) }
      : {}),
  };
  try {
    const view = await setStorage({ store, config: ctx.config }, id, input);
    if (values.json) out(JSON.stringify(view));
    else out(`set the bucket of ${id}: ${show(view)}`);
    return 0;
  } catch (err) {
    if (err instanceof ApiError && err.code !== "internal_error") {
      const details = Array.isArray(err.details)
        ? (err.details as FieldProblem[]).map((d) => `\n  --${d.field.replaceAll("_", "-")}: ${d.message}`).join("")
        : "";
      throw new UsageError(`${err.message}${details}`);
    }
    throw err;
  }
}
