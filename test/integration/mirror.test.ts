import { createHash } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { Mirror, type MirrorOptions } from "../../src/workers/mirror.js";
import { createTestRelay, type TestRelay } from "../helpers/relay.js";
import {
  mirrorOptions,
  patternSha,
  startBucketProxy,
  startFileServer,
  startS3,
  streamPattern,
  succeedTask,
  type TestS3,
} from "../helpers/mirror.js";
import { setStorage } from "../../src/services/storage.js";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { startReceiver, verifyAt } from "../helpers/receiver.js";
import { signedIn } from "../helpers/dashboard.js";

const KEY = Buffer.alloc(32, 9).toString("base64");
const PNG = Buffer.from(`89504e470d0a1a0a${"00".repeat(992)}`, "hex"); // 1,000 bytes
const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");

let s3: TestS3;
let files: Awaited<ReturnType<typeof startFileServer>>;
const relays: TestRelay[] = [];
const mirrors: Mirror[] = [];

let releaseGate: () => void = () => {};
let gateReached: Promise<void> = Promise.resolve();
let reachedGate: () => void = () => {};
/** Whether the next request of /out/gated.bin waits for the test after 9 MiB (later ones do not). */
let gateArmed = false;
function armGate(): void {
  gateArmed = true;
  gateReached = new Promise((r) => (reachedGate = r));
}

beforeAll(async () => {
  s3 = await startS3("outputs", ["doomed"]);
  files = await startFileServer({
    "/out/a.png": (_req, res) => {
      res.writeHead(200, { "Content-Type": "image/png", "Content-Length": String(PNG.length) });
      res.end(PNG);
    },
    "/out/clip": (_req, res) => {
      res.writeHead(200, { "Content-Type": "video/mp4" });
      void streamPattern(res, 3 * 1024 * 1024 + 17);
    },
    "/out/redirect.png": (_req, res) => {
      res.writeHead(302, { Location: "/out/a.png" }).end();
    },
    "/out/declared-big.bin": (_req, res) => {
      res.writeHead(200, { "Content-Length": "50000000" });
      res.write(Buffer.alloc(100));
    },
    "/out/stall.bin": (_req, res) => {
      res.writeHead(200, { "Content-Length": "10000" });
      res.write(Buffer.alloc(100)); // then nothing more
    },
    "/out/missing.png": (_req, res) => {
      res.writeHead(404).end();
    },
    // 12 MiB: the first 9 MiB, then waits for the test (a multipart upload is under way by then).
    "/out/gated.bin": async (_req, res) => {
      res.writeHead(200, { "Content-Type": "application/octet-stream" });
      const gate = gateArmed ? new Promise<void>((r) => (releaseGate = r)) : Promise.resolve();
      const reached = gateArmed ? reachedGate : () => {};
      gateArmed = false;
      const nine = 9 * 1024 * 1024;
      for (let sent = 0; sent < nine; sent += 1024 * 1024)
        if (!res.write(Buffer.alloc(1024 * 1024, 7))) await new Promise((r) => res.once("drain", r));
      reached();
      await gate;
      for (let sent = 0; sent < 3 * 1024 * 1024; sent += 1024 * 1024)
        if (!res.write(Buffer.alloc(1024 * 1024, 7))) await new Promise((r) => res.once("drain", r));
      res.end();
    },
  });
});
afterAll(async () => {
  await files.close();
  await s3.close();
});
afterEach(async () => {
  for (const m of mirrors.splice(0)) await m.close();
  for (const r of relays.splice(0)) await r.close();
});

function relay(env: Record<string, string> = {}): TestRelay {
  const t = createTestRelay({
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
    RELAY_ENCRYPTION_KEY: KEY,
    WEBHOOK_RETRY_SCHEDULE: "0s",
    ...env,
  });
  relays.push(t);
  return t;
}

/** A task of the relay's client `clientId` that the upstream shows succeeded with `output`, now. */
const succeededOn = (t: TestRelay, clientId: string, output: unknown, callbackUrl?: string) =>
  succeedTask(t.store, t.relay.lifecycle, clientId, output, t.clock.now(), callbackUrl);

/** A mirror on the relay's store with test timings (a short stall limit, one retry 1 s later). */
function mirrorOf(t: TestRelay, extra: Partial<MirrorOptions> = {}): Mirror {
  const deps = { store: t.store, clock: t.clock, lifecycle: t.relay.lifecycle, encryptionKey: t.config.encryptionKey };
  const m = new Mirror(
    mirrorOptions(deps, {
      allowPrivateNetworks: t.config.webhookAllowPrivateNetworks,
      maxBytes: t.config.mirrorMaxBytes,
      idleTimeoutMs: 500,
      retryScheduleMs: [1_000],
      ...extra,
    }),
  );
  mirrors.push(m);
  return m;
}

async function setBucket(t: TestRelay, apiKey: string, extra: Record<string, unknown> = {}) {
  const res = await t.request(apiKey, "/openapi/v1/storage", { method: "PUT", json: s3.storageBody(extra) });
  expect(res.status, await res.clone().text()).toBe(200);
  return res.json();
}

async function eventsOf(t: TestRelay, taskId: string) {
  return (await t.store.events.ofTask(taskId)).map((e) => ({ type: e.type, body: JSON.parse(e.payload) }));
}

describe("PUT/GET/DELETE /openapi/v1/storage", () => {
  it("sets, shows (never the secret) and removes the client's bucket; the secret is sealed at rest", async () => {
    const t = relay();
    const c = t.client();
    expect((await t.request(c.apiKey, "/openapi/v1/storage")).status).toBe(404);
    const put = await setBucket(t, c.apiKey, { secret_access_key: "top-secret-value", url_expires_in: 3600 });
    const expected = {
      endpoint: s3.endpoint,
      bucket: "outputs",
      region: "us-east-1",
      prefix: "gen/",
      access_key_id: "S3RVER",
      force_path_style: true,
      public_base_url: null,
      url_expires_in: 3600,
    };
    expect(put).toEqual({ data: expected });
    const got = await t.request(c.apiKey, "/openapi/v1/storage");
    const text = await got.text();
    expect(JSON.parse(text)).toEqual({ data: expected });
    expect(text).not.toContain("top-secret-value");
    const row = await t.store.clients.find(c.id);
    expect(row!.storageConfig).not.toContain("top-secret-value");
    expect(row!.storageConfig).toContain("enc:v1:");
    // Another client sees nothing of it.
    const other = t.client("other");
    expect((await t.request(other.apiKey, "/openapi/v1/storage")).status).toBe(404);
    expect((await t.request(c.apiKey, "/openapi/v1/storage", { method: "DELETE" })).status).toBe(204);
    expect((await t.request(c.apiKey, "/openapi/v1/storage")).status).toBe(404);
    expect((await t.request(c.apiKey, "/openapi/v1/storage", { method: "DELETE" })).status).toBe(404);
  });

  it("refuses without RELAY_ENCRYPTION_KEY, with a clear error", async () => {
    const t = relay({ RELAY_ENCRYPTION_KEY: "" });
    const c = t.client();
    const res = await t.request(c.apiKey, "/openapi/v1/storage", { method: "PUT", json: s3.storageBody() });
    expect(res.status).toBe(409);
    const body: any = await res.json();
    expect(body.error.code).toBe("encryption_key_required");
    expect(body.error.message).toContain("RELAY_ENCRYPTION_KEY");
  });

  it("checks the endpoint like a callback URL, and every field", async () => {
    const t = relay({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: "false" });
    const c = t.client();
    const res = await t.request(c.apiKey, "/openapi/v1/storage", {
      method: "PUT",
      json: s3.storageBody({ endpoint: "https://127.0.0.1:9000", bucket: "Bad Bucket", url_expires_in: 604801 }),
    });
    expect(res.status).toBe(422);
    const body: any = await res.json();
    expect(body.error.code).toBe("validation_error");
    const fields = (body.error.details as Array<{ field: string }>).map((d) => d.field).sort();
    expect(fields).toEqual(["bucket", "url_expires_in"]);
    const res2 = await t.request(c.apiKey, "/openapi/v1/storage", {
      method: "PUT",
      json: s3.storageBody({ endpoint: "https://169.254.169.254" }),
    });
    const body2: any = await res2.json();
    expect(res2.status).toBe(422);
    expect(body2.error.details).toEqual([{ field: "endpoint", message: expect.stringContaining("link-local") }]);
  });
});

describe("mirroring a succeeded task's output", () => {
  it("copies every URL before task.succeeded; the event and reads carry files with the stored bytes' sha256; output stays verbatim", async () => {
    const t = relay();
    const c = t.client();
    await setBucket(t, c.apiKey);
    const receiver = await startReceiver();
    try {
      const output = {
        images: [{ url: files.url("/out/a.png"), width: 1 }],
        video: { url: files.url("/out/clip") },
        note: "not a url",
      };
      const task = await succeededOn(t, c.id, output, receiver.url("/hook"));
      // Upstream says succeeded; the relay holds the event until the copies exist.
      expect(task).toMatchObject({ status: "processing", phase: "mirroring" });
      expect(await eventsOf(t, task.id)).toEqual([]);
      expect(
        ((await t.request(c.apiKey, `/openapi/v1/tasks/${task.id}`).then((r) => r.json())) as any).data.status,
      ).toBe("processing");

      expect(await t.relay.mirror.runOnce()).toBe(1);
      const events = await eventsOf(t, task.id);
      expect(events.map((e) => e.type)).toEqual(["task.succeeded"]);
      const data = events[0]!.body.data;
      expect(data.output).toEqual(output);
      expect(data.previous_status).toBe("processing");
      expect(data.files).toEqual([
        {
          source_url: output.images[0]!.url,
          url: expect.stringContaining("X-Amz-Signature="),
          key: `gen/${task.id}/0.png`,
          bytes: 1000,
          sha256: sha(PNG),
          content_type: "image/png",
        },
        {
          source_url: output.video.url,
          url: expect.stringContaining("X-Amz-Expires=604800"),
          key: `gen/${task.id}/1.mp4`,
          bytes: 3 * 1024 * 1024 + 17,
          sha256: patternSha(3 * 1024 * 1024 + 17),
          content_type: "video/mp4",
        },
      ]);
      // What the bucket holds, read back (s3rver once stored aws-chunked framing inside objects).
      expect(await s3.read(`gen/${task.id}/0.png`)).toEqual({
        sha256: sha(PNG),
        bytes: 1000,
        contentType: "image/png",
      });
      expect((await s3.read(`gen/${task.id}/1.mp4`)).sha256).toBe(patternSha(3 * 1024 * 1024 + 17));
      // The presigned URL serves the copy.
      const viaUrl = Buffer.from(await (await fetch(data.files[0].url)).arrayBuffer());
      expect(sha(viaUrl)).toBe(sha(PNG));
      const read: any = await t.request(c.apiKey, `/openapi/v1/tasks/${task.id}`).then((r) => r.json());
      expect(read.data).toMatchObject({ status: "succeeded", files: data.files });
      expect(read.output).toEqual(output);

      // Delivered, signed, with the files.
      await t.relay.dispatcher.runOnce();
      const got = receiver.requests[0]!;
      const verified = verifyAt(c.secret, got, t.clock.now()) as { data: { files: unknown } };
      expect(verified.data.files).toEqual(data.files);
      const metrics = await (await t.request(null, "/metrics")).text();
      expect(metrics).toMatch(/genrelay_mirror_files_total\{outcome="copied"\} 2/);
      expect(metrics).toMatch(new RegExp(`genrelay_mirror_bytes_total ${1000 + 3 * 1024 * 1024 + 17}`));
    } finally {
      await receiver.close();
    }
  });

  it("a client without a bucket is not held back; public_base_url gives base + key", async () => {
    const t = relay();
    const plain = t.client("plain");
    const plainTask = await succeededOn(t, plain.id, { url: files.url("/out/a.png") });
    expect(plainTask).toMatchObject({ status: "succeeded", phase: "done" });
    expect((await eventsOf(t, plainTask.id))[0]!.body.data.files).toBeUndefined();

    const c = t.client("public");
    await setBucket(t, c.apiKey, { public_base_url: "https://cdn.example.com/media/" });
    const task = await succeededOn(t, c.id, { url: files.url("/out/a.png") });
    await mirrorOf(t).runOnce();
    const files0 = (await eventsOf(t, task.id))[0]!.body.data.files[0];
    expect(files0.url).toBe(`https://cdn.example.com/media/gen/${task.id}/0.png`);
  });

  it("a client's row is read once for the bucket decisions of its successes, again once its bucket changes", async () => {
    const t = relay();
    const c = t.client("later");
    const reads = vi.spyOn(t.store.clients, "find");
    for (let i = 0; i < 3; i++)
      expect(await succeededOn(t, c.id, { url: files.url("/out/a.png") })).toMatchObject({ phase: "done" });
    expect(reads.mock.calls.filter(([id]) => id === c.id)).toHaveLength(1);
    await setBucket(t, c.apiKey, { public_base_url: "https://cdn.example.com/media/" });
    expect(await succeededOn(t, c.id, { url: files.url("/out/a.png") })).toMatchObject({ phase: "mirroring" });
  });
});

/** Runs mirror rounds (the fake clock moved to each retry) until the task is done; its task.succeeded data. */
async function mirrorUntilDone(t: TestRelay, m: Mirror, taskId: string): Promise<any> {
  for (let round = 0; round < 5; round++) {
    await m.runOnce();
    const task = await t.store.tasks.find(taskId);
    if (task!.phase === "done") {
      const events = await eventsOf(t, taskId);
      expect(events.map((e) => e.type)).toEqual(["task.succeeded"]);
      expect((await t.store.events.ofTask(taskId))[0]!.deliveryStatus).toBe("pending");
      return events[0]!.body.data;
    }
    expect(task).toMatchObject({ phase: "mirroring", status: "processing" });
    t.clock.advance(1_000);
  }
  throw new Error("the task never left mirroring");
}

describe("bad input ends in a clear files[i].error and an event, never a stuck task", () => {
  it.each([
    ["a redirect", "/out/redirect.png", /^redirect \(302\) not followed: the output URL must serve the file itself$/],
    [
      "a declared body over MIRROR_MAX_BYTES",
      "/out/declared-big.bin",
      /^larger than MIRROR_MAX_BYTES \(2000000 bytes\): 50000000 bytes$/,
    ],
    ["a streamed body over MIRROR_MAX_BYTES", "/out/clip", /^larger than MIRROR_MAX_BYTES \(2000000 bytes\)$/],
    [
      "a server that stalls mid-body (retried, then given up)",
      "/out/stall.bin",
      /^the output URL stalled: nothing received for 500 ms \(after 2 attempts\)$/,
    ],
    ["a 404", "/out/missing.png", /^the output URL answered HTTP 404$/],
  ])("%s", async (_name, path, error) => {
    const t = relay({ MIRROR_MAX_BYTES: "2000000" });
    const c = t.client();
    await setBucket(t, c.apiKey);
    const output = { images: [{ url: files.url(path) }, { url: files.url("/out/a.png") }] };
    const task = await succeededOn(t, c.id, output);
    const data = await mirrorUntilDone(t, mirrorOf(t), task.id);
    expect(data.files).toEqual([
      { source_url: files.url(path), error: expect.stringMatching(error) },
      expect.objectContaining({ source_url: files.url("/out/a.png"), sha256: sha(PNG) }),
    ]);
    expect(data.status).toBe("succeeded");
  });

  it("an output URL on a private address is refused unless WEBHOOK_ALLOW_PRIVATE_NETWORKS", async () => {
    const t = relay({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: "false" });
    const c = t.client();
    await setStorage(
      { store: t.store, config: { ...t.config, webhookAllowPrivateNetworks: true } },
      c.id,
      s3.storageBody(),
    );
    const task = await succeededOn(t, c.id, { url: files.url("/out/a.png") });
    const data = await mirrorUntilDone(t, mirrorOf(t), task.id);
    expect(data.files).toEqual([
      {
        source_url: files.url("/out/a.png"),
        error: expect.stringMatching(
          /^blocked: 127\.0\.0\.1 is loopback; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true/,
        ),
      },
    ]);
  });

  it.each([
    [
      "403",
      { status: 403, code: "AccessDenied" },
      /^bucket: access denied by the bucket \(AccessDenied\): check the key's permissions \(after 2 attempts\)$/,
    ],
    [
      "500",
      { status: 500, code: "InternalError" },
      /^bucket answered HTTP 500 InternalError: InternalError from the test proxy \(after 2 attempts\)$/,
    ],
  ])("a bucket answering %s", async (_name, fail, error) => {
    const proxy = await startBucketProxy(s3.endpoint);
    try {
      proxy.state.fail = fail;
      const t = relay();
      const c = t.client();
      await setBucket(t, c.apiKey, { endpoint: proxy.endpoint });
      const task = await succeededOn(t, c.id, { url: files.url("/out/a.png") });
      const data = await mirrorUntilDone(t, mirrorOf(t), task.id);
      expect(data.files).toEqual([{ source_url: files.url("/out/a.png"), error: expect.stringMatching(error) }]);
    } finally {
      await proxy.close();
    }
  });

  it("wrong credentials", async () => {
    const t = relay();
    const c = t.client();
    await setBucket(t, c.apiKey, { access_key_id: "NOT-A-KEY" });
    const task = await succeededOn(t, c.id, { url: files.url("/out/a.png") });
    const data = await mirrorUntilDone(t, mirrorOf(t), task.id);
    expect(data.files[0].error).toMatch(
      /^bucket: wrong credentials: the bucket does not know this access key id \(InvalidAccessKeyId\)/,
    );
  });

  it("the bucket deleted while a multipart copy is under way", async () => {
    const t = relay();
    const c = t.client();
    await setBucket(t, c.apiKey, { bucket: "doomed" });
    const task = await succeededOn(t, c.id, { url: files.url("/out/gated.bin") });
    const m = mirrorOf(t);
    armGate();
    const first = m.runOnce();
    await gateReached;
    rmSync(join(s3.dir, "doomed"), { recursive: true, force: true });
    releaseGate();
    await first;
    // The copy failed against a bucket that is gone; the retry finds it gone too, and the event goes out.
    t.clock.advance(1_000);
    const data = await mirrorUntilDone(t, m, task.id);
    expect(data.files).toEqual([
      {
        source_url: files.url("/out/gated.bin"),
        error: expect.stringMatching(/^bucket: the bucket does not exist \(NoSuchBucket\)/),
      },
    ]);
  });
});

describe("crash safety", () => {
  it("a copy cut off mid-upload (its process gone) is made again by the next holder; the event is written once", async () => {
    const t = relay();
    const c = t.client();
    await setBucket(t, c.apiKey);
    const task = await succeededOn(t, c.id, { a: files.url("/out/a.png"), b: files.url("/out/gated.bin") });
    const dying = mirrorOf(t, { leaseMs: 30_000 });
    armGate();
    const cut = dying.runOnce();
    await gateReached;
    // The first file is copied and recorded; the second is mid-upload when the process "dies".
    expect(JSON.parse((await t.store.tasks.find(task.id))!.filesJson!).files[0]).toMatchObject({ sha256: sha(PNG) });
    await dying.close();
    releaseGate();
    await cut;
    expect(await eventsOf(t, task.id)).toEqual([]);
    // Its lease is still held: nobody else copies until it runs out.
    const next = mirrorOf(t);
    expect(await next.runOnce()).toBe(0);
    t.clock.advance(30_001);
    expect(await next.runOnce()).toBe(1);
    const events = await eventsOf(t, task.id);
    expect(events.map((e) => e.type)).toEqual(["task.succeeded"]);
    expect(events[0]!.body.data.files.map((f: any) => [f.key, f.bytes])).toEqual([
      [`gen/${task.id}/0.png`, 1000],
      [`gen/${task.id}/1.bin`, 12 * 1024 * 1024],
    ]);
    expect((await s3.read(`gen/${task.id}/1.bin`)).bytes).toBe(12 * 1024 * 1024);
  });
});

describe("dashboard", () => {
  it("sets and removes the bucket on its own page; the secret is never shown", async () => {
    const t = relay();
    const c = t.client();
    const v = await signedIn(t, c.apiKey);
    expect(await v.page("/dashboard/storage")).toContain("No bucket is set");
    const body = s3.storageBody();
    const bad = await v.submit("/dashboard/storage", "/dashboard/storage", {
      ...body,
      bucket: "No Such",
      force_path_style: "true",
    } as Record<string, string>);
    expect(bad.status).toBe(422);
    expect(await bad.text()).toContain("bucket: must be 3-63 characters");
    const saved = await v.submit("/dashboard/storage", "/dashboard/storage", {
      ...body,
      force_path_style: "true",
    } as Record<string, string>);
    const html = await saved.text();
    expect(saved.status).toBe(200);
    expect(html).toContain("Bucket saved");
    expect(html).not.toContain('S3RVER"><');
    expect(await t.request(c.apiKey, "/openapi/v1/storage").then((r) => r.json())).toMatchObject({
      data: { bucket: "outputs", force_path_style: true },
    });
    const removed = await v.submit("/dashboard/storage", "/dashboard/storage/remove");
    expect(await removed.text()).toContain("Bucket removed");
    expect((await t.request(c.apiKey, "/openapi/v1/storage")).status).toBe(404);
  });

  it("previews a task from its copy, served by the relay: the page's CSP names no outside origin", async () => {
    const t = relay();
    const c = t.client();
    await setBucket(t, c.apiKey);
    const task = await succeededOn(t, c.id, { images: [{ url: files.url("/out/a.png") }] });
    await mirrorOf(t).runOnce();
    const v = await signedIn(t, c.apiKey);
    const res = await v.get(`/dashboard/tasks/${task.id}`);
    const html = await res.text();
    expect(
      res.headers.get("content-security-policy"),
      html.slice(html.indexOf("<main"), html.indexOf("<main") + 1500),
    ).toContain("img-src 'self';");
    expect(html).toContain(`src="/dashboard/tasks/${task.id}/files/0"`);
    const file = await v.get(`/dashboard/tasks/${task.id}/files/0`);
    expect(file.status).toBe(200);
    expect(file.headers.get("content-type")).toBe("image/png");
    expect(file.headers.get("content-security-policy")).toBe("default-src 'none'; sandbox");
    expect(sha(Buffer.from(await file.arrayBuffer()))).toBe(sha(PNG));
    // Another client's session cannot read it.
    const other = t.client("other");
    const w = await signedIn(t, other.apiKey);
    expect((await w.get(`/dashboard/tasks/${task.id}/files/0`)).status).toBe(404);
    expect((await v.get(`/dashboard/tasks/${task.id}/files/7`)).status).toBe(404);
  });
});
