import { z } from "zod";
import { MAX_URL_EXPIRES_IN } from "../mirror/bucket.js";
import type { ClientRow } from "../store/rows.js";
import { baseUrlProblem } from "../net/base-url.js";
import { validateCallbackUrl } from "../net/address-guard.js";
import { sealSecret } from "../crypto.js";
import { linkKeyFor, readStored, type StorageView, type StoredBucket } from "../mirror/stored-bucket.js";
import type { ServiceDeps } from "./deps.js";
import { ApiError, type FieldProblem } from "./errors.js";

/**
 * A client's bucket (docs/contract.md, "Outputs"): where its outputs are copied. Stored in clients.storage_config as
 * JSON with the secret access key sealed under RELAY_ENCRYPTION_KEY (required to set one); never
 * shown again once set.
 */

const printable = (max: number) =>
  z
    .string()
    .min(1)
    .max(max)
    .regex(/^[\x21-\x7e]+$/, "must be printable ASCII without spaces");

export const StorageInput = z.strictObject({
  endpoint: z.string().max(2048),
  bucket: z
    .string()
    .regex(
      /^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$/,
      "must be 3-63 characters: lower-case letters, digits, dots, hyphens, underscores",
    ),
  region: z.string().regex(/^[a-z0-9-]{1,32}$/, "must be a region name such as us-east-1 (or auto)"),
  prefix: z
    .string()
    .max(512)
    .refine(
      (p) => !p.startsWith("/") && !/(^|\/)\.\.?(\/|$)/.test(p) && !/[\u0000-\u001f\u007f\\]/.test(p),
      "must be a key prefix such as outputs/ (no leading /, no . or .. segments)",
    )
    .default(""),
  access_key_id: printable(256),
  secret_access_key: printable(256),
  force_path_style: z.boolean().default(false),
  public_base_url: z.string().max(2048).nullable().default(null),
  url_expires_in: z
    .number()
    .int()
    .min(1)
    .max(MAX_URL_EXPIRES_IN, `must be at most ${MAX_URL_EXPIRES_IN} (7 days, the longest a presigned URL lives)`)
    .default(MAX_URL_EXPIRES_IN),
});

export type StorageInput = z.input<typeof StorageInput>;

function problems(issues: z.core.$ZodIssue[]): FieldProblem[] {
  return issues.map((i) => ({
    field: i.path.length > 0 ? i.path.join(".") : ((i as { keys?: string[] }).keys?.join(", ") ?? "body"),
    message: i.message,
  }));
}

/** Checks and normalises a bucket setting; throws 422 validation_error naming each bad field. */
export function parseStorageInput(
  input: unknown,
  allowPrivateNetworks: boolean,
): StorageView & { secret_access_key: string } {
  const parsed = StorageInput.safeParse(input);
  if (!parsed.success)
    throw new ApiError("validation_error", "The bucket setting is not valid.", problems(parsed.error.issues));
  const v = parsed.data;
  const found: FieldProblem[] = [];
  // The endpoint is the caller's choice, like a callback URL: the same address checks.
  const endpoint = validateCallbackUrl(v.endpoint, { allowPrivateNetworks });
  let endpointUrl = "";
  if (!endpoint.ok) found.push({ field: "endpoint", message: endpoint.reason });
  else {
    const u = new URL(endpoint.url);
    if (baseUrlProblem(new URL(v.endpoint)) !== null || (u.pathname !== "/" && u.pathname !== ""))
      found.push({
        field: "endpoint",
        message: "must be an origin such as https://s3.us-east-1.amazonaws.com (no path or query)",
      });
    endpointUrl = u.origin;
  }
  let publicBase: string | null = null;
  if (v.public_base_url !== null) {
    const base = validateCallbackUrl(v.public_base_url, { allowPrivateNetworks: true });
    // Judged as given (validateCallbackUrl drops a fragment): keys are appended to it as a path.
    const problem = base.ok ? baseUrlProblem(new URL(v.public_base_url)) : base.reason;
    if (problem !== null) found.push({ field: "public_base_url", message: problem });
    else publicBase = (base as { url: string }).url.replace(/\/+$/, "");
  }
  if (found.length > 0) throw new ApiError("validation_error", "The bucket setting is not valid.", found);
  return { ...v, endpoint: endpointUrl, public_base_url: publicBase };
}

function viewOf(stored: StoredBucket): StorageView {
  const { secret_access_key: _secret, link_key: _links, ...view } = stored;
  return view;
}

function requireKey(key: Buffer | null): Buffer {
  if (!key) {
    throw new ApiError(
      "encryption_key_required",
      "This relay has no RELAY_ENCRYPTION_KEY, so it cannot keep a bucket's secret access key sealed; the operator must set it (openssl rand -base64 32) before buckets can be set.",
    );
  }
  return key;
}

/** Sets (or replaces) the client's bucket. */
export async function setStorage(
  deps: Pick<ServiceDeps, "store" | "config">,
  clientId: string,
  input: unknown,
): Promise<StorageView> {
  const key = requireKey(deps.config.encryptionKey);
  const v = parseStorageInput(input, deps.config.webhookAllowPrivateNetworks);
  const setting: StoredBucket = {
    endpoint: v.endpoint,
    bucket: v.bucket,
    region: v.region,
    prefix: v.prefix,
    access_key_id: v.access_key_id,
    secret_access_key: sealSecret(v.secret_access_key, key),
    force_path_style: v.force_path_style,
    public_base_url: v.public_base_url,
    url_expires_in: v.url_expires_in,
  };
  // The file links' key stays while the same bucket does (new credentials, another prefix): the
  // links already handed out keep working. Another bucket, or one set after a DELETE, gets a new key.
  const changed = await deps.store.clients.updateWith(clientId, (client) => {
    const stored = { ...setting, link_key: linkKeyFor(readStored(client.storageConfig), setting, key) };
    return { patch: { storageConfig: JSON.stringify(stored) }, result: stored };
  });
  if (!changed) throw new ApiError("not_found", "No such client.");
  return viewOf(changed.result);
}

/** The client's bucket without its secret, or null when none is set. */
export function storageOf(client: Pick<ClientRow, "storageConfig">): StorageView | null {
  const stored = readStored(client.storageConfig);
  return stored ? viewOf(stored) : null;
}

export async function getStorage(deps: Pick<ServiceDeps, "store">, clientId: string): Promise<StorageView | null> {
  const client = await deps.store.clients.find(clientId);
  return client ? storageOf(client) : null;
}

/** Removes the client's bucket; false when none was set. Copies already made stay where they are. */
export async function deleteStorage(deps: Pick<ServiceDeps, "store">, clientId: string): Promise<boolean> {
  const changed = await deps.store.clients.updateWith(clientId, (client) => ({
    patch: client.storageConfig === null ? {} : { storageConfig: null },
    result: client.storageConfig !== null,
  }));
  return changed?.result ?? false;
}
