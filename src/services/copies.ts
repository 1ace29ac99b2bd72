import type { Readable } from "node:stream";
import type { FairPool } from "../core/fair-pool.js";
import { Bucket } from "../mirror/bucket.js";
import type { FileRecord } from "../mirror/copy.js";
import { LINK_URL_EXPIRES_IN, linkTokenValid, parseLinkToken } from "../mirror/links.js";
import type { TaskRow } from "../store/rows.js";
import type { ServiceDeps } from "./deps.js";
import { ApiError } from "./errors.js";
import { type FileLinkCache, linkClientOf } from "./files.js";
import { openStorage } from "../mirror/stored-bucket.js";

export type CopiedFile = Extract<FileRecord, { sha256: string }>;

/** The copies made of a task's output (docs/contract.md, "Outputs"), by their index in `files`; none while they are being made. */
export function copiedFiles(task: Pick<TaskRow, "filesJson">): Array<{ n: number; file: CopiedFile }> {
  let files: unknown;
  try {
    files = task.filesJson ? JSON.parse(task.filesJson) : null;
  } catch {
    return [];
  }
  if (!Array.isArray(files)) return [];
  return (files as FileRecord[]).flatMap((file, n) => ("sha256" in file ? [{ n, file }] : []));
}

/** Where reads of copies take their slots (the dashboard's previews), how long one waits for a slot, and the reader's going away. */
export interface CopyReadOptions {
  slots?: Pick<FairPool, "acquire">;
  waitMs?: number;
  signal?: AbortSignal;
}

/**
 * Streams copy `n` of the client's task out of its bucket. The bucket's answer is passed through
 * without buffering; `done` releases the connection (and the read's slot) once the reader has
 * finished. With `slots`, the read holds a slot of that fair pool from before the bucket is asked:
 * none within `waitMs` is a 429 concurrent_limit (the client's share is taken by its own reads).
 */
export async function readCopy(
  deps: Pick<ServiceDeps, "store" | "config">,
  clientId: string,
  taskId: string,
  n: number,
  opts: CopyReadOptions = {},
): Promise<{ file: CopiedFile; body: Readable; contentLength: number | null; done: () => void }> {
  const task = await deps.store.tasks.findOfClient(clientId, taskId);
  const entry = task ? copiedFiles(task).find((f) => f.n === n) : undefined;
  if (!entry) throw new ApiError("not_found", "This task has no such copy.");
  const client = await deps.store.clients.find(clientId);
  const config = client ? openStorage(client, deps.config.encryptionKey) : null;
  if (!config) throw new ApiError("not_found", "The bucket holding this copy is no longer set.");
  const slot = opts.slots
    ? await opts.slots.acquire(clientId, clientId, {
        waitMs: opts.waitMs ?? 0,
        ...(opts.signal ? { signal: opts.signal } : {}),
      })
    : null;
  if (opts.slots && !slot) {
    throw new ApiError(
      "concurrent_limit",
      "Too many of your copies are being read at once; try again in a moment.",
      undefined,
      { "Retry-After": "1" },
    );
  }
  const bucket = new Bucket(config, { allowPrivateNetworks: deps.config.webhookAllowPrivateNetworks });
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    opts.signal?.removeEventListener("abort", close);
    bucket.close();
    slot?.release();
  };
  // A reader gone before the bucket answered frees the read's sockets and its slot.
  opts.signal?.addEventListener("abort", close, { once: true });
  try {
    const { body, contentLength } = await bucket.open(entry.file.key, opts.signal);
    return { file: entry.file, body, contentLength, done: close };
  } catch (err) {
    close();
    throw new ApiError("service_unavailable", `The copy could not be read from the bucket: ${(err as Error).message}`);
  }
}

/** One answer for every link that leads nowhere: which of the reasons it was is not told. */
const noSuchLink = () =>
  new ApiError(
    "not_found",
    "No such file: the link is unknown, or the file is no longer kept (task pruned or storage removed).",
  );

/**
 * Where a file link (`GET /files/{token}`, docs/contract.md, "Links that last") sends its reader
 * now: a URL of the copy presigned for LINK_URL_EXPIRES_IN seconds from the relay's clock (or the
 * bucket's public_base_url + key). 404 when the token is not one, its task is gone (pruned), its
 * client revoked, or its client's bucket removed (the link key with it) or replaced by another.
 */
export async function fileLinkTarget(
  deps: Pick<ServiceDeps, "store" | "config" | "clock">,
  token: string,
  opts: { cache?: FileLinkCache } = {},
): Promise<string> {
  const { cache } = opts;
  const parsed = parseLinkToken(token);
  if (!parsed) throw noSuchLink();
  const task = await deps.store.tasks.filesOf(parsed.taskId);
  if (!task) throw noSuchLink();
  const linked = cache ? await cache.client(task.clientId) : await linkClientOf(deps, task.clientId);
  if (!linked?.linkKey || !linkTokenValid(linked.linkKey, parsed)) throw noSuchLink();
  const entry = copiedFiles(task).find((f) => f.n === parsed.n);
  if (!entry) throw noSuchLink();
  const options = { allowPrivateNetworks: deps.config.webhookAllowPrivateNetworks };
  const open = () => {
    const config = openStorage(linked.client, deps.config.encryptionKey);
    if (!config) throw noSuchLink();
    return config;
  };
  let bucket: Bucket;
  try {
    bucket = cache ? cache.presigners.get(linked.client.id, linked.setting, open) : new Bucket(open(), options);
  } catch {
    // A setting the relay can no longer open (its key changed, an endpoint now refused): no copy to send to.
    throw noSuchLink();
  }
  const now = deps.clock.now();
  const kept = cache?.url(bucket, entry.file.key, now);
  if (kept) return kept;
  try {
    const url = await bucket.urlOf(entry.file.key, { expiresIn: LINK_URL_EXPIRES_IN, signingDate: new Date(now) });
    cache?.keep(bucket, entry.file.key, url, now);
    return url;
  } catch (err) {
    throw new ApiError("service_unavailable", `The copy's URL could not be made: ${(err as Error).message}`);
  } finally {
    if (!cache) bucket.close();
  }
}
