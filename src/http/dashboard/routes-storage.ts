import { Readable } from "node:stream";
import type { Context, Hono, MiddlewareHandler } from "hono";
import { copiedFiles, readCopy } from "../../services/copies.js";
import { ApiError } from "../../services/errors.js";
import { deleteStorage, getStorage, setStorage } from "../../services/storage.js";
import type { TaskRow } from "../../store/rows.js";
import { PREVIEW_WAIT_MS, previewSlots, type Preview } from "./previews.js";
import { refusalText, render, type DashboardDeps } from "./render.js";
import type { DashEnv } from "./session.js";
import { storageBody, type StoragePageView } from "./views-storage.js";

/** Content types a copy is shown inline as; anything else is a download (never HTML on the dashboard's origin). */
const INLINE = /^(image\/(png|jpeg|gif|webp|avif)|video\/(mp4|webm|quicktime))$/;

/**
 * Previews of a task from its copies in the client's bucket, served by the relay itself (so the
 * page's CSP needs no outside origin); null when the task has none.
 */
export function mirroredPreviews(task: TaskRow): Preview[] | null {
  const copies = copiedFiles(task).filter(({ file }) => INLINE.test(file.content_type));
  if (copies.length === 0) return null;
  return copies.map(({ n, file }) => ({
    url: `/dashboard/tasks/${encodeURIComponent(task.id)}/files/${n}`,
    kind: file.content_type.startsWith("video/") ? "video" : "image",
    origin: "'self'",
  }));
}

export function registerStoragePages(app: Hono<DashEnv>, deps: DashboardDeps, auth: MiddlewareHandler<DashEnv>): void {
  // Reads of copies from clients' buckets, each client within its share (previews.ts).
  const slots = previewSlots();
  const show = async (c: Context<DashEnv>, extra: Partial<StoragePageView> = {}, status = 200) => {
    const view: StoragePageView = {
      csrf: c.get("session").csrfToken,
      storage: await getStorage(deps, c.get("client").id),
      canSeal: deps.config.encryptionKey !== null,
      ...extra,
    };
    return render(c, deps, { title: "Storage", section: "storage", body: storageBody(view), status });
  };

  app.get("/storage", auth, (c) => show(c));

  app.post("/storage", auth, async (c) => {
    const form = await c.req.parseBody();
    const text = (name: string) => (typeof form[name] === "string" ? (form[name] as string).trim() : "");
    const typed = Object.fromEntries(
      ["endpoint", "bucket", "region", "prefix", "access_key_id", "public_base_url"].map((k) => [k, text(k)]),
    );
    const input = {
      ...typed,
      secret_access_key: typeof form.secret_access_key === "string" ? form.secret_access_key : "",
      force_path_style: form.force_path_style === "true",
      public_base_url: typed.public_base_url ? typed.public_base_url : null,
    };
    try {
      await setStorage(deps, c.get("client").id, input);
      return show(c, { saved: "Bucket saved. Outputs of tasks that succeed from now on are copied into it." });
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      return show(c, { error: refusalText(err), typed }, err.status);
    }
  });

  app.post("/storage/remove", auth, async (c) => {
    const removed = await deleteStorage(deps, c.get("client").id);
    return show(
      c,
      removed ? { saved: "Bucket removed. Copies already made stay in it." } : { error: "No bucket is set." },
    );
  });

  // A copy, streamed from the bucket through the relay: previews stay on the dashboard's own origin.
  app.get("/tasks/:id/files/:n", auth, async (c) => {
    const n = Number(c.req.param("n"));
    if (!Number.isInteger(n) || n < 0) throw new ApiError("not_found", "This task has no such copy.");
    const copy = await readCopy(deps, c.get("client").id, c.req.param("id"), n, {
      slots,
      waitMs: PREVIEW_WAIT_MS,
      signal: c.req.raw.signal,
    });
    copy.body.once("close", copy.done);
    const inline = INLINE.test(copy.file.content_type);
    const headers: Record<string, string> = {
      "Content-Type": inline ? copy.file.content_type : "application/octet-stream",
      "Content-Disposition": inline
        ? "inline"
        : `attachment; filename="${copy.file.key
            .split("/")
            .pop()!
            .replace(/[^\w.-]/g, "_")}"`,
      "Content-Security-Policy": "default-src 'none'; sandbox",
      "X-Content-Type-Options": "nosniff",
      "Cache-Control": "private, max-age=300",
    };
    if (copy.contentLength !== null) headers["Content-Length"] = String(copy.contentLength);
    return new Response(Readable.toWeb(copy.body) as ReadableStream, { status: 200, headers });
  });
}
