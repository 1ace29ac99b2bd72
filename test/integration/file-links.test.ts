import { createHash } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { loadConfig } from "../../src/config.js";
import { Writable } from "node:stream";
import { Hono } from "hono";
import { requestLog } from "../../src/http/middleware.js";
import { createLogger } from "../../src/logger.js";
import { linkToken, newLinkKey } from "../../src/mirror/links.js";
import { newClient, revokeClient } from "../../src/services/clients.js";
import { fileLinkTarget } from "../../src/services/copies.js";
import { ApiError } from "../../src/services/errors.js";
import { FileLinkCache, LINK_URL_MIN_LEFT_MS } from "../../src/services/files.js";
import { deleteStorage, setStorage } from "../../src/services/storage.js";
import { Mirror } from "../../src/workers/mirror.js";
import { FakeClock } from "../helpers/fake-clock.js";
import {
  mirroringLifecycle,
  mirrorOptions,
  startFileServer,
  startS3,
  succeedTask,
  type TestS3,
} from "../helpers/mirror.js";
import { createTestRelay, type TestRelay } from "../helpers/relay.js";
import { openDatabase } from "../../src/db/sqlite/open.js";
import { sqliteStore } from "../../src/open-store.js";
import { storeDialects } from "../helpers/store-dialects.js";
import type { Store } from "../../src/store/store.js";

/**
 * Links that last (docs/contract.md, "Links that last"; issue #33 item 4): with PUBLIC_BASE_URL,
 * each copied file gets data.files[i].link, which redirects to a URL presigned anew on every
 * request, so it works after any presigned URL it gave has expired, and ends (404) when the task
 * is pruned or the client's storage removed. Against s3rver on loopback, which refuses presigned
 * URLs past their expiry by its own (real) clock: the relay's fake clock is set a week back, then
 * moved to now, so no test waits for anything to expire.
 */

const KEY = Buffer.alloc(32, 9).toString("base64");
const BASE = "https://relay.example.com/gr";
const PNG = Buffer.from(`89504e470d0a1a0a${"00".repeat(992)}`, "hex");
const MP4 = Buffer.alloc(4321, 5);
const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");
const WEEK_AND_A_DAY = 8 * 24 * 3600_000;
const LINK = /^https:\/\/relay\.example\.com\/gr\/files\/(task_[0-9a-z]{26}\.\d+\.[A-Za-z0-9_-]{43})$/;

let s3: TestS3;
let files: Awaited<ReturnType<typeof startFileServer>>;
beforeAll(async () => {
  s3 = await startS3("outputs", ["other"]);
  files = await startFileServer({
    "/out/a.png": (_req, res) => {
      res.writeHead(200, { "Content-Type": "image/png", "Content-Length": String(PNG.length) });
      res.end(PNG);
    },
    "/out/b.mp4": (_req, res) => {
      res.writeHead(200, { "Content-Type": "video/mp4" });
      res.end(MP4);
    },
  });
});
afterAll(async () => {
  await files.close();
  await s3.close();
});

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function download(url: string): Promise<{ status: number; sha256: string; text: string }> {
  const res = await fetch(url);
  const body = Buffer.from(await res.arrayBuffer());
  return { status: res.status, sha256: sha(body), text: body.toString("utf8") };
}

const pathOf = (link: string) => link.slice(BASE.length);

describe("GET /files/{token}", () => {
  function relay(env: Record<string, string> = {}): TestRelay {
    const t = createTestRelay({
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
      RELAY_ENCRYPTION_KEY: KEY,
      PUBLIC_BASE_URL: BASE,
      ...env,
    });
    cleanups.push(() => t.close());
    return t;
  }

  async function mirrored(t: TestRelay, clientId: string) {
    const output = { images: [{ url: files.url("/out/a.png") }], video: { url: files.url("/out/b.mp4") } };
    const task = await succeedTask(t.store, t.relay.lifecycle, clientId, output, t.clock.now(), null);
    expect(await t.relay.mirror.runOnce()).toBe(1);
    const [event] = await t.store.events.ofTask(task.id);
    return { task, files: JSON.parse(event!.payload).data.files as Array<{ link: string; url: string }> };
  }

  /** A relay (clock at the real time), a client with a bucket, a task copied into it, and its first file's link path. */
  async function linkedRelay() {
    const t = relay();
    t.clock.set(Date.now());
    const c = t.client();
    await setStorage({ store: t.store, config: t.config }, c.id, s3.storageBody());
    const { files: copied } = await mirrored(t, c.id);
    return { t, c, path: pathOf(copied[0]!.link) };
  }

  it("redirects to a fresh presigned URL of the copy, still after every URL it gave has expired", async () => {
    const t = relay();
    // A week and a day ago, by the relay's clock: what it presigns then has expired by now.
    t.clock.set(Date.now() - WEEK_AND_A_DAY);
    const c = t.client();
    const put = await t.request(c.apiKey, "/openapi/v1/storage", { method: "PUT", json: s3.storageBody() });
    expect(put.status).toBe(200);
    expect(Object.keys(((await put.json()) as { data: object }).data)).not.toContain("link_key");
    const { task, files: copied } = await mirrored(t, c.id);

    // Each copy has its own link under PUBLIC_BASE_URL; the task read shows the same.
    expect(copied).toHaveLength(2);
    const [link0, link1] = copied.map((f) => f.link) as [string, string];
    expect(link0).toMatch(LINK);
    expect(link1).toMatch(LINK);
    expect(link0).not.toBe(link1);
    expect(link0).toContain(`/files/${task.id}.0.`);
    const read: any = await (await t.request(c.apiKey, `/openapi/v1/tasks/${task.id}`)).json();
    expect(read.data.files.map((f: { link: string }) => f.link)).toEqual([link0, link1]);

    const first = await t.request(null, pathOf(link0));
    expect(first.status).toBe(302);
    expect(first.headers.get("cache-control")).toBe("no-store");
    const stale = first.headers.get("location")!;
    expect(stale).toContain("X-Amz-Expires=900");
    expect(new URL(stale).pathname).toBe(`/outputs/gen/${task.id}/0.png`);

    // A week later (now, by s3rver's clock): that URL has expired, the link still works.
    t.clock.set(Date.now());
    const expired = await download(stale);
    expect(expired.status).toBe(403);
    expect(expired.text).toContain("Request has expired");
    const again = await t.request(null, pathOf(link0));
    expect(again.status).toBe(302);
    const fresh = again.headers.get("location")!;
    expect(fresh).not.toBe(stale);
    expect(await download(fresh)).toMatchObject({ status: 200, sha256: sha(PNG) });
    // The other file's link names the other file.
    const other = (await t.request(null, pathOf(link1))).headers.get("location")!;
    expect(new URL(other).pathname).toBe(`/outputs/gen/${task.id}/1.mp4`);
    expect(await download(other)).toMatchObject({ status: 200, sha256: sha(MP4) });
    // HEAD answers the same, without a body.
    const head = await t.request(null, pathOf(link0), { method: "HEAD" });
    expect(head.status).toBe(302);
    expect(head.headers.get("location")).toContain(`/outputs/gen/${task.id}/0.png`);
    expect(await head.text()).toBe("");
  });

  it("is 404 for a garbled or made-up token, and for a token of another file of the same task", async () => {
    const t = relay();
    t.clock.set(Date.now());
    const c = t.client();
    await setStorage({ store: t.store, config: t.config }, c.id, s3.storageBody());
    const { task, files: copied } = await mirrored(t, c.id);
    const token = LINK.exec(copied[0]!.link)![1]!;
    const mac = token.split(".")[2]!;
    const tries = [
      "nonsense",
      `${token}x`,
      token.slice(0, -1) + (token.endsWith("A") ? "B" : "A"),
      // The right MAC, moved to the other file, or to a file the task does not have.
      `${task.id}.1.${mac}`,
      `${task.id}.5.${mac}`,
      // A well-formed token under another key.
      linkToken(newLinkKey(), task.id, 0),
      `task_00000000000000000000000000.0.${mac}`,
    ];
    for (const bad of tries) {
      const res = await t.request(null, `/files/${encodeURIComponent(bad)}`);
      expect(res.status, bad).toBe(404);
      expect(res.headers.get("location")).toBeNull();
      expect(((await res.json()) as any).error).toMatchObject({ code: "not_found" });
    }
    expect((await t.request(null, pathOf(copied[0]!.link))).status).toBe(302);
  });

  it("ends (404) when the storage is removed, for good; a new key for the same bucket keeps it", async () => {
    const { t, c, path } = await linkedRelay();
    // New credentials and prefix for the same bucket: the links already handed out keep working.
    await setStorage({ store: t.store, config: t.config }, c.id, s3.storageBody({ prefix: "elsewhere/" }));
    expect((await t.request(null, path)).status).toBe(302);
    // Another bucket: the copies are not in it, the link ends.
    await setStorage({ store: t.store, config: t.config }, c.id, s3.storageBody({ bucket: "other" }));
    expect((await t.request(null, path)).status).toBe(404);

    const { files: again } = await mirrored(t, c.id);
    const path2 = pathOf(again[0]!.link);
    expect((await t.request(null, path2)).status).toBe(302);
    const removed = await t.request(c.apiKey, "/openapi/v1/storage", { method: "DELETE" });
    expect(removed.status).toBe(204);
    const gone = await t.request(null, path2);
    expect(gone.status).toBe(404);
    expect(((await gone.json()) as any).error.code).toBe("not_found");
    // Setting the same bucket again does not bring old links back.
    await setStorage({ store: t.store, config: t.config }, c.id, s3.storageBody({ bucket: "other" }));
    expect((await t.request(null, path2)).status).toBe(404);
  });

  it("ends (404) when the task is pruned", async () => {
    const t = relay({ TASK_RETENTION_DAYS: "1" });
    t.clock.set(Date.now());
    const c = t.client();
    await setStorage({ store: t.store, config: t.config }, c.id, s3.storageBody());
    const { task, files: copied } = await mirrored(t, c.id);
    const path = pathOf(copied[1]!.link);
    expect((await t.request(null, path)).status).toBe(302);
    expect(await t.store.tasks.pruneFinished(t.clock.now() + 1, 100)).toBe(1);
    expect(await t.store.tasks.find(task.id)).toBeUndefined();
    expect((await t.request(null, path)).status).toBe(404);
  });

  it("a storage set before links existed gets a key when its next task is copied", async () => {
    const t = relay();
    t.clock.set(Date.now());
    const c = t.client();
    await setStorage({ store: t.store, config: t.config }, c.id, s3.storageBody());
    // As stored before this version: no link_key.
    const row = await t.store.clients.find(c.id);
    const { link_key: _gone, ...old } = JSON.parse(row!.storageConfig!);
    await t.store.clients.update(c.id, { storageConfig: JSON.stringify(old) });
    const { files: copied } = await mirrored(t, c.id);
    expect(copied[0]!.link).toMatch(LINK);
    expect((await t.request(null, pathOf(copied[0]!.link))).status).toBe(302);
  });

  it("serves a redirect from its cache: no full task or client row, the same URL while 10 minutes of it are left (issue #43)", async () => {
    const { t, path } = await linkedRelay();
    const tasks = vi.spyOn(t.store.tasks, "find");
    const clients = vi.spyOn(t.store.clients, "find");
    const location = async () => {
      const res = await t.request(null, path);
      expect(res.status).toBe(302);
      return res.headers.get("location")!;
    };
    const first = await location();
    for (let i = 0; i < 20; i++) expect(await location()).toBe(first);
    expect(tasks).not.toHaveBeenCalled();
    expect(clients).toHaveBeenCalledTimes(1);
    // Reused while at least LINK_URL_MIN_LEFT_MS of its 15 minutes are left, never closer to its end.
    t.clock.advance(15 * 60_000 - LINK_URL_MIN_LEFT_MS - 1);
    expect(await location()).toBe(first);
    t.clock.advance(1);
    const second = await location();
    expect(second).not.toBe(first);
    expect(await download(second)).toMatchObject({ status: 200, sha256: sha(PNG) });
    expect(clients).toHaveBeenCalledTimes(1);
  });

  it("forgets a cached redirect at once when the client is revoked, here or by the CLI's process", async () => {
    const t = relay();
    t.clock.set(Date.now());
    const c = t.client();
    const d = t.client("other");
    await setStorage({ store: t.store, config: t.config }, c.id, s3.storageBody());
    await setStorage({ store: t.store, config: t.config }, d.id, s3.storageBody());
    const path = pathOf((await mirrored(t, c.id)).files[0]!.link);
    const pathD = pathOf((await mirrored(t, d.id)).files[0]!.link);
    expect((await t.request(null, path)).status).toBe(302);
    expect((await t.request(null, pathD)).status).toBe(302);
    await revokeClient(t.relay.deps, c.id);
    expect((await t.request(null, path)).status).toBe(404);
    // Another process on the same SQLite file (the CLI): seen by the next request's pollChanges.
    const cli = sqliteStore(openDatabase(t.config.databasePath));
    cleanups.push(() => cli.close());
    await cli.clients.update(d.id, { revokedAt: t.clock.now() });
    expect((await t.request(null, pathD)).status).toBe(404);
  });

  it("without PUBLIC_BASE_URL a copy has no link", async () => {
    const t = createTestRelay({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true", RELAY_ENCRYPTION_KEY: KEY });
    cleanups.push(() => t.close());
    const c = t.client();
    await setStorage({ store: t.store, config: t.config }, c.id, s3.storageBody());
    const { files: copied } = await mirrored(t, c.id);
    expect(copied[0]).not.toHaveProperty("link");
    expect(copied[0]!.url).toContain("X-Amz-Signature=");
  });
});

describe("request logs", () => {
  it("never show a link's token: the path is logged as /files/{token}", async () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _enc, done) {
        lines.push(String(chunk));
        done();
      },
    });
    const app = new Hono();
    app.use(requestLog(createLogger("info", sink)));
    app.get("/files/:token", (c) => c.body(null, 302, { Location: "https://bucket.example/x" }));
    app.get("/openapi/v1/tasks/:id", (c) => c.body(null, 404));
    const token = `task_01jf3y8k2m9q7r5t3v1w0x6z4a.0.${"s".repeat(43)}`;
    expect((await app.request(`/files/${token}`)).status).toBe(302);
    expect((await app.request("/openapi/v1/tasks/task_x")).status).toBe(404);
    const paths = lines.map((l) => JSON.parse(l).path);
    expect(paths).toEqual(["/files/{token}", "/openapi/v1/tasks/task_x"]);
    expect(lines.join("")).not.toContain("sss");
  });
});

const dialects = storeDialects((fn) => cleanups.push(fn));
const config = loadConfig({
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
  RELAY_ENCRYPTION_KEY: Buffer.alloc(32, 3).toString("base64"),
  PUBLIC_BASE_URL: BASE,
});

/** A client with a bucket, and the lifecycle and mirror that copy its tasks' outputs into it. */
async function copying(store: Store, clock: FakeClock, name: string) {
  const lifecycle = mirroringLifecycle(store, clock);
  const client = await store.clients.insert(newClient(clock.now(), { name }).row);
  await setStorage({ store, config }, client.id, s3.storageBody());
  const mirror = new Mirror(
    mirrorOptions(
      { store, clock, lifecycle, encryptionKey: config.encryptionKey },
      { publicBaseUrl: config.publicBaseUrl },
    ),
  );
  cleanups.push(() => mirror.close());
  return { lifecycle, client, mirror };
}

describe.each(dialects)("file links on %s", (_name, make) => {
  it("a link outlives its presigned URLs on every instance, and ends with the storage or the task", async () => {
    const { store, another } = await make();
    const clock = new FakeClock(Date.now() - WEEK_AND_A_DAY);
    const { lifecycle, client, mirror } = await copying(store, clock, "links");
    const output = { images: [{ url: files.url("/out/a.png") }, { url: files.url("/out/b.mp4") }] };
    // Copied (so completed) first: the one a retention cutoff between the two removes.
    const pruned = await succeedTask(store, lifecycle, client.id, output, clock.now(), null);
    expect(await mirror.runOnce()).toBe(1);
    const prunedCompletedAt = (await store.tasks.find(pruned.id))!.completedAt!;
    clock.advance(60_000);
    const task = await succeedTask(store, lifecycle, client.id, output, clock.now(), null);
    expect(await mirror.runOnce()).toBe(1);
    const linksOf = async (id: string) =>
      (JSON.parse((await store.tasks.find(id))!.filesJson!) as Array<{ link: string }>).map(
        (f) => LINK.exec(f.link)![1]!,
      );
    const [token0, token1] = await linksOf(task.id);
    const [prunedToken] = await linksOf(pruned.id);

    const stale = await fileLinkTarget({ store, config, clock }, token0!);
    clock.set(Date.now());
    expect((await download(stale)).status).toBe(403);
    // Another instance (its own connection pool on PostgreSQL) answers the link alike.
    const elsewhere = { store: await another(), config, clock };
    const fresh = await fileLinkTarget(elsewhere, token0!);
    expect(fresh).not.toBe(stale);
    expect(await download(fresh)).toMatchObject({ status: 200, sha256: sha(PNG) });
    expect(await download(await fileLinkTarget(elsewhere, token1!))).toMatchObject({ status: 200, sha256: sha(MP4) });

    const notFound = (p: Promise<unknown>) =>
      expect(p).rejects.toSatisfy((e) => e instanceof ApiError && e.code === "not_found");
    await notFound(fileLinkTarget(elsewhere, `${token0!.slice(0, -2)}xx`));
    await notFound(fileLinkTarget(elsewhere, linkToken(newLinkKey(), task.id, 0)));

    expect(await fileLinkTarget(elsewhere, prunedToken!)).toContain(`/${pruned.id}/0.png`);
    expect(await store.tasks.pruneFinished(prunedCompletedAt + 1, 100)).toBe(1);
    await notFound(fileLinkTarget(elsewhere, prunedToken!));
    expect(await fileLinkTarget(elsewhere, token0!)).toContain(`/${task.id}/0.png`);

    expect(await deleteStorage({ store }, client.id)).toBe(true);
    await notFound(fileLinkTarget(elsewhere, token0!));
    await notFound(fileLinkTarget({ store, config, clock }, token1!));
  });

  it("an instance's cached redirect ends when another instance revokes the client", async () => {
    const { store, another } = await make();
    const clock = new FakeClock(Date.now());
    const { lifecycle, client, mirror } = await copying(store, clock, "cached");
    const task = await succeedTask(
      store,
      lifecycle,
      client.id,
      { images: [{ url: files.url("/out/a.png") }] },
      clock.now(),
      null,
    );
    expect(await mirror.runOnce()).toBe(1);
    const token = LINK.exec(
      (JSON.parse((await store.tasks.find(task.id))!.filesJson!) as Array<{ link: string }>)[0]!.link,
    )![1]!;
    const elsewhere = await another();
    await elsewhere.ops.listen(() => {});
    const cache = new FileLinkCache({ store: elsewhere, config });
    cleanups.push(async () => cache.close());
    const deps = { store: elsewhere, config, clock };
    const first = await fileLinkTarget(deps, token, { cache });
    expect(await fileLinkTarget(deps, token, { cache })).toBe(first);
    const heard = new Promise<void>((resolve) => {
      const stop = elsewhere.clients.watch((changed) => {
        if (changed !== client.id) return;
        stop();
        resolve();
      });
    });
    await revokeClient({ store, clock, lifecycle }, client.id);
    await heard;
    await expect(fileLinkTarget(deps, token, { cache })).rejects.toSatisfy(
      (e) => e instanceof ApiError && e.code === "not_found",
    );
  });
});
