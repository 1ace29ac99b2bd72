import type { Readable } from "node:stream";
import { Bucket } from "../mirror/bucket.js";
import type { FileRecord } from "../mirror/copy.js";
import type { TaskRow } from "../store/store.js";
import type { ServiceDeps } from "./deps.js";
import { ApiError } from "./errors.js";
import { openStorage } from "./storage.js";

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

/**
 * Streams copy `n` of the client's task out of its bucket. The bucket's answer is passed through
 * without buffering; `done` releases the connection once the reader has finished.
 */
export async function readCopy(
  deps: Pick<ServiceDeps, "store" | "config">,
  clientId: string,
  taskId: string,
  n: number,
): Promise<{ file: CopiedFile; body: Readable; contentLength: number | null; done: () => void }> {
  const task = await deps.store.tasks.findOfClient(clientId, taskId);
  const entry = task ? copiedFiles(task).find((f) => f.n === n) : undefined;
  if (!entry) throw new ApiError("not_found", "This task has no such copy.");
  const client = await deps.store.clients.find(clientId);
  const config = client ? openStorage(client, deps.config.encryptionKey) : null;
  if (!config) throw new ApiError("not_found", "The bucket holding this copy is no longer set.");
  const bucket = new Bucket(config, { allowPrivateNetworks: deps.config.webhookAllowPrivateNetworks });
  try {
    const { body, contentLength } = await bucket.open(entry.file.key);
    return { file: entry.file, body, contentLength, done: () => bucket.close() };
  } catch (err) {
    bucket.close();
    throw new ApiError("service_unavailable", `The copy could not be read from the bucket: ${(err as Error).message}`);
  }
}
