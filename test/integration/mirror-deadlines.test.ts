import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { Bucket, type BucketConfig, type BucketDeadlines } from "../../src/mirror/bucket.js";
import { copyFile, type Copied } from "../../src/mirror/copy.js";
import { SourceFetcher, type SourceOptions } from "../../src/mirror/source.js";
import { newClient } from "../../src/services/clients.js";
import { setStorage } from "../../src/services/storage.js";
import type { Store } from "../../src/store/store.js";
import { Mirror } from "../../src/workers/mirror.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { startDripServer, startSilentServer, type Hostile } from "../helpers/hostile.js";
import {
  mirroringLifecycle,
  mirrorOptions,
  patternSha,
  startFileServer,
  startS3,
  streamPattern,
  succeedTask,
  type TestS3,
} from "../helpers/mirror.js";
import { storeDialects } from "../helpers/store-dialects.js";

/**
 * docs/contract.md, "Deadlines everywhere", for output copies: a bucket or an output host that accepts
 * and then never answers, or drips, ends the copy as an ordinary retryable failure within its
 * deadline, frees the slot for other clients' copies, and after the last round the file goes out
 * with files[i].error. Test deadlines are short; the production ones are in
 * docs/decisions/0009-deadlines.md.
 */
const BUCKET: BucketDeadlines = {
  connectTimeoutMs: 1_000,
  idleTimeoutMs: 600,
  requestTimeoutMs: 1_500,
  totalTimeoutMs: 3_000,
  answerTimeoutMs: 800,
  minRate: { bytes: 8 * 1024, windowMs: 600 },
};
const DOWNLOAD = { totalTimeoutMs: 3_000, minRate: { bytes: 8 * 1024, windowMs: 600 } };
/** The longest a hostile party may hold a slot here: the total deadline, and a margin for a loaded machine. */
const HELD_AT_MOST_MS = 3_000 + 1_500;

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

let s3: TestS3;
let files: Awaited<ReturnType<typeof startFileServer>>;
let silent: Hostile;
let deaf: Hostile;
let drip: Awaited<ReturnType<typeof startDripServer>>;
beforeAll(async () => {
  s3 = await startS3();
  silent = await startSilentServer();
  deaf = await startSilentServer({ read: false });
  // One byte every 150 ms: never silent for the idle limit (500 ms), far below the minimum rate.
  drip = await startDripServer({ intervalMs: 150, headers: { "Content-Type": "image/png" } });
  files = await startFileServer({
    "/f.png": (_req, res) => {
      res.writeHead(200, { "Content-Type": "image/png", "Content-Length": "5000" });
      res.end(Buffer.alloc(5000, 1));
    },
    // Unknown length: a multipart upload.
    "/big.bin": (_req, res) => {
      res.writeHead(200, { "Content-Type": "application/octet-stream" });
      void streamPattern(res, 9 * 1024 * 1024);
    },
    "/sized.bin": (_req, res) => {
      res.writeHead(200, { "Content-Type": "application/octet-stream", "Content-Length": String(8 * 1024 * 1024) });
      void streamPattern(res, 8 * 1024 * 1024);
    },
    // Above the minimum rate (64 KiB/s) but never done: only the total deadline ends it.
    "/endless.bin": (_req, res) => {
      res.writeHead(200, { "Content-Type": "application/octet-stream", "Content-Length": String(1024 ** 3) });
      const timer = setInterval(() => res.write(Buffer.alloc(16 * 1024, 3)), 100);
      res.on("close", () => clearInterval(timer));
    },
  });
});
afterAll(async () => {
  for (const s of [files, silent, deaf, drip]) await s?.close();
  await s3?.close();
});

const config = loadConfig({
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
  RELAY_ENCRYPTION_KEY: Buffer.alloc(32, 3).toString("base64"),
});

function bucketOf(endpoint: string): BucketConfig {
  return {
    endpoint,
    bucket: s3.bucket,
    region: "us-east-1",
    prefix: "gen/",
    accessKeyId: "S3RVER",
    secretAccessKey: "S3RVER",
    forcePathStyle: true,
    publicBaseUrl: null,
    urlExpiresIn: 3600,
  };
}

/** One copy through copyFile with the test deadlines; what it ended with and how long it took. */
async function copyOnce(sourceUrl: string, endpoint: string, download: Partial<SourceOptions> = {}) {
  const source = new SourceFetcher({
    allowPrivateNetworks: true,
    idleTimeoutMs: 500,
    maxBytes: 1024 ** 3,
    ...DOWNLOAD,
    ...download,
  });
  const bucket = new Bucket(bucketOf(endpoint), { allowPrivateNetworks: true, deadlines: BUCKET });
  cleanups.push(async () => {
    bucket.close();
    await source.close();
  });
  const started = performance.now();
  type Failure = { name: string; message: string; retryable: boolean; kind: string };
  const outcome: { copied?: Copied; err?: Failure } = await copyFile(source, bucket, {
    sourceUrl,
    taskId: "task_x",
    n: 0,
    maxBytes: 1024 ** 3,
    signal: new AbortController().signal,
  }).then(
    (copied) => ({ copied }),
    (err: unknown) => ({ err: err as Failure }),
  );
  return { ...outcome, ms: performance.now() - started };
}

/** The copy failed on its total deadline of `ms`, not before, and let go of its slot soon after. */
function expectEndedAtDeadline(r: Awaited<ReturnType<typeof copyOnce>>, ms: number, message: string): void {
  expect(r.err).toMatchObject({ name: "CopyError", retryable: true, kind: "deadline", message });
  expect(r.ms).toBeGreaterThanOrEqual(ms - 50);
  expect(r.ms).toBeLessThan(HELD_AT_MOST_MS);
}

describe("one copy against a hostile party ends within its deadline as a retryable failure", () => {
  it("a bucket that accepts the connection, takes the body and never answers", async () => {
    const r = await copyOnce(files.url("/f.png"), silent.url);
    expect(r.err).toMatchObject({ name: "CopyError", retryable: true, kind: "bucket" });
    expect(r.err!.message).toMatch(/^bucket /);
    expect(r.ms).toBeLessThan(HELD_AT_MOST_MS);
    await silent.allClosed();
  });

  it("a bucket that never reads the body of a streamed PutObject (8 MiB)", async () => {
    const r = await copyOnce(files.url("/sized.bin"), deaf.url);
    expect(r.err).toMatchObject({ name: "CopyError", retryable: true, kind: "bucket" });
    expect(r.ms).toBeLessThan(HELD_AT_MOST_MS);
    await deaf.allClosed();
  });

  it("a bucket that never answers a multipart upload (a source without a length)", async () => {
    const r = await copyOnce(files.url("/big.bin"), silent.url);
    expect(r.err).toMatchObject({ name: "CopyError", retryable: true, kind: "bucket" });
    expect(r.ms).toBeLessThan(HELD_AT_MOST_MS);
    await silent.allClosed();
  });

  it("an output host that answers, then drips one byte at a time (never silent long enough for the idle limit)", async () => {
    const r = await copyOnce(`${drip.url}/out.png`, s3.endpoint);
    expect(r.err).toMatchObject({ name: "CopyError", retryable: true, kind: "too_slow" });
    expect(r.err!.message).toMatch(
      /^the output URL moved \d+ bytes in \d+ ms, below the minimum of 8192 bytes per 600 ms$/,
    );
    expect(r.ms).toBeLessThan(HELD_AT_MOST_MS);
    await drip.allClosed();
  });

  it("an output host fast enough for the minimum rate but never done: the total deadline", async () => {
    const r = await copyOnce(files.url("/endless.bin"), s3.endpoint);
    expectEndedAtDeadline(r, 3_000, "the output URL took longer than its deadline of 3000 ms");
  });

  it("an output host with a Content-Length, fast enough for the minimum rate: the deadline its size needs, not the total", async () => {
    // 20 KiB declared, sized at 10 KiB/s with a grace of 200 ms: 2.2 s, before the 3 s total. It sends 5 KiB/s,
    // above the minimum rate, so the file would take 4 s: a host holding its copy slot as long as the rates let it.
    const sized = await startFileServer({
      "/sized-endless.bin": (_req, res) => {
        res.writeHead(200, { "Content-Type": "application/octet-stream", "Content-Length": String(20 * 1024) });
        const timer = setInterval(() => res.write(Buffer.alloc(512, 3)), 100);
        res.on("close", () => clearInterval(timer));
      },
    });
    cleanups.push(() => sized.close());
    const r = await copyOnce(sized.url("/sized-endless.bin"), s3.endpoint, {
      minRate: { bytes: 1024, windowMs: 600 },
      sizedFor: { bytesPerSecond: 10 * 1024, graceMs: 200 },
    });
    expectEndedAtDeadline(
      r,
      2_200,
      "the output URL took longer than its deadline of 2200 ms (20480 bytes at 10240 bytes/s)",
    );
    expect(r.ms).toBeLessThan(3_000);
  });

  it("a healthy copy under the same deadlines goes through", async () => {
    const r = await copyOnce(files.url("/big.bin"), s3.endpoint);
    expect(r.copied).toMatchObject({ bytes: 9 * 1024 * 1024, sha256: patternSha(9 * 1024 * 1024) });
  });
});

describe("reading a copy back (the dashboard's preview) has a deadline", () => {
  it("a bucket that never answers: open fails within its deadline, and lets go of the connection", async () => {
    const bucket = new Bucket(bucketOf(silent.url), { allowPrivateNetworks: true, deadlines: BUCKET });
    cleanups.push(async () => bucket.close());
    const started = performance.now();
    await expect(bucket.open("gen/task_x/0.png")).rejects.toMatchObject({
      name: "BucketError",
      retryable: true,
      message: "bucket: the bucket's answer to a read took longer than its deadline of 800 ms",
    });
    expect(performance.now() - started).toBeLessThan(800 + 1_000);
    await silent.allClosed();
  });

  it("a bucket that answers, then drips the body: the body fails below the minimum rate", async () => {
    const bucket = new Bucket(bucketOf(drip.url), { allowPrivateNetworks: true, deadlines: BUCKET });
    cleanups.push(async () => bucket.close());
    const started = performance.now();
    const { body } = await bucket.open("gen/task_x/0.png");
    const read = (async () => {
      for await (const _ of body) {
        /* drain */
      }
    })();
    await expect(read).rejects.toMatchObject({ name: "DeadlineError", kind: "rate" });
    expect(performance.now() - started).toBeLessThan(HELD_AT_MOST_MS);
    await drip.allClosed();
  });
});

const dialects = storeDialects((fn) => cleanups.push(fn)).map(
  ([name, make]) => [name, async () => (await make()).store] as [string, () => Promise<Store>],
);

describe.each(dialects)("the mirror on %s: a hostile party's copy frees its slot", (_name, make) => {
  async function setUp(hostileEndpoint: string | null) {
    const store = await make();
    const clock = new FakeClock();
    const lifecycle = mirroringLifecycle(store, clock);
    const [hostile, victim] = await Promise.all(
      ["hostile", "victim"].map((name) => store.clients.insert(newClient(clock.now(), { name }).row)),
    );
    await setStorage(
      { store, config },
      hostile!.id,
      s3.storageBody(hostileEndpoint ? { endpoint: hostileEndpoint } : {}),
    );
    await setStorage({ store, config }, victim!.id, s3.storageBody());
    const opts = mirrorOptions(
      { store, clock, lifecycle, encryptionKey: config.encryptionKey },
      {
        maxBytes: 1 << 30,
        // One slot: while the hostile client's copy holds it, nobody else's copy runs.
        concurrency: 1,
        idleTimeoutMs: 500,
        retryScheduleMs: [1_000],
        deadlines: { download: DOWNLOAD, bucket: BUCKET },
      },
    );
    const mirror = new Mirror(opts);
    cleanups.push(() => mirror.close());
    return { store, clock, lifecycle, hostile: hostile!, victim: victim!, mirror };
  }

  async function holdsThenFrees(hostileEndpoint: string | null, hostileUrl: string, expected: RegExp) {
    const { store, clock, lifecycle, hostile, victim, mirror } = await setUp(hostileEndpoint);
    const bad = await succeedTask(store, lifecycle, hostile.id, { images: [{ url: hostileUrl }] }, clock.now());
    const good = await succeedTask(
      store,
      lifecycle,
      victim.id,
      { images: [{ url: files.url("/f.png") }] },
      clock.advance(10),
    );

    // The hostile client's task is first in line and takes the only slot; its copy ends within the deadline.
    const started = performance.now();
    expect(await mirror.runOnce()).toBe(1);
    expect(performance.now() - started).toBeLessThan(HELD_AT_MOST_MS);
    const progress = JSON.parse((await store.tasks.find(bad.id))!.filesJson!);
    expect(progress).toMatchObject({ rounds: 1, files: [{ source_url: hostileUrl, final: false }] });
    expect(progress.files[0].error).toMatch(expected);

    // The slot is free: the victim's copy runs next and its task.succeeded is written.
    expect(await mirror.runOnce()).toBe(1);
    expect(await store.tasks.find(good.id)).toMatchObject({ phase: "done", status: "succeeded" });
    const [event] = await store.events.ofTask(good.id);
    expect(JSON.parse(event!.payload).data.files).toEqual([
      expect.objectContaining({ key: `gen/${good.id}/0.png`, bytes: 5000 }),
    ]);

    // After the last round the hostile client's file goes out with files[i].error; the event is not held back.
    clock.advance(1_001);
    expect(await mirror.runOnce()).toBe(1);
    expect(await store.tasks.find(bad.id)).toMatchObject({ phase: "done", status: "succeeded" });
    const [badEvent] = await store.events.ofTask(bad.id);
    const sent = JSON.parse(badEvent!.payload).data.files;
    expect(sent).toEqual([{ source_url: hostileUrl, error: expect.stringMatching(expected) }]);
    expect(sent[0].error).toMatch(/\(after 2 attempts\)$/);
  }

  it("a bucket that accepts connections and never answers", async () => {
    await holdsThenFrees(silent.url, files.url("/f.png"), /^bucket /);
    await silent.allClosed();
  });

  it("an output host that drips one byte at a time", async () => {
    await holdsThenFrees(null, `${drip.url}/out.png`, /^the output URL moved \d+ bytes in \d+ ms, below the minimum/);
    await drip.allClosed();
  });
});
