import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GetObjectCommand, S3Client } from "@aws-sdk/client-s3";
// @ts-expect-error s3rver ships no types
import S3rver from "s3rver";
import { newId } from "../../src/ids.js";
import type { Clock } from "../../src/clock.js";
import { Lifecycle } from "../../src/core/lifecycle.js";
import { noNudges } from "../../src/core/nudges.js";
import type { Store } from "../../src/store/store.js";
import type { TaskRow } from "../../src/store/rows.js";
import { silentLogger } from "../../src/logger.js";
import type { MirrorOptions } from "../../src/workers/mirror.js";
import { LeaseOwner } from "../../src/workers/owner.js";
import { imageTaskRow } from "./store-dialects.js";

/** A real S3-compatible server (s3rver) on loopback, with one bucket, in a temp folder. */
export async function startS3(bucket = "outputs", others: string[] = []) {
  const dir = mkdtempSync(join(tmpdir(), "genrelay-s3-"));
  const buckets = [bucket, ...others].map((name) => ({ name }));
  const server = new S3rver({ address: "127.0.0.1", port: 0, silent: true, directory: dir, configureBuckets: buckets });
  const address = (await server.run()) as AddressInfo;
  const endpoint = `http://127.0.0.1:${address.port}`;
  const client = new S3Client({
    endpoint,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" },
    requestChecksumCalculation: "WHEN_REQUIRED",
    responseChecksumValidation: "WHEN_REQUIRED",
  });
  return {
    endpoint,
    bucket,
    dir,
    server,
    client,
    /** The stored object's bytes, read back: what the bucket really holds. */
    async read(key: string): Promise<{ sha256: string; bytes: number; contentType: string | undefined }> {
      const res = await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
      const hash = createHash("sha256");
      let bytes = 0;
      for await (const chunk of res.Body as AsyncIterable<Buffer>) {
        hash.update(chunk);
        bytes += chunk.length;
      }
      return { sha256: hash.digest("hex"), bytes, contentType: res.ContentType };
    },
    storageBody(extra: Record<string, unknown> = {}) {
      return {
        endpoint,
        bucket,
        region: "us-east-1",
        prefix: "gen/",
        access_key_id: "S3RVER",
        secret_access_key: "S3RVER",
        force_path_style: true,
        ...extra,
      };
    },
    async close() {
      client.destroy();
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
export type TestS3 = Awaited<ReturnType<typeof startS3>>;

/** Deterministic bytes: chunk i of a file is the same on every run, so its sha256 is computable. */
export function patternChunk(i: number, size = 64 * 1024): Buffer {
  const buf = Buffer.alloc(size);
  for (let o = 0; o < size; o += 4) buf.writeUInt32LE((i * 2654435761 + o) >>> 0, o);
  return buf;
}

/** The sha256 of `bytes` of the pattern, computed independently of the code under test. */
export function patternSha(bytes: number): string {
  const hash = createHash("sha256");
  for (let i = 0, left = bytes; left > 0; i++) {
    const chunk = patternChunk(i);
    hash.update(chunk.subarray(0, Math.min(left, chunk.length)));
    left -= chunk.length;
  }
  return hash.digest("hex");
}

/** Writes `bytes` of the pattern, honouring backpressure (never the whole file in memory). */
export async function streamPattern(res: ServerResponse, bytes: number): Promise<void> {
  for (let i = 0, left = bytes; left > 0; i++) {
    const chunk = patternChunk(i);
    const part = chunk.subarray(0, Math.min(left, chunk.length));
    left -= part.length;
    if (!res.write(part)) await new Promise<void>((r) => res.once("drain", r));
  }
  res.end();
}

type Handler = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>;

/** The output files' server, on loopback: routes by path, streaming. */
export async function startFileServer(routes: Record<string, Handler>) {
  const sockets = new Set<import("node:net").Socket>();
  const server: Server = createServer((req, res) => {
    const path = new URL(req.url ?? "/", "http://x").pathname;
    const handler = routes[path];
    if (!handler) {
      res.writeHead(404).end("no such file");
      return;
    }
    void Promise.resolve(handler(req, res)).catch(() => res.destroy());
  });
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    base,
    routes,
    url: (path: string) => `${base}${path}`,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

let seq = 0;

/** The lifecycle the mirror suites record through: every task mirrors, runs at once, and wakes no one. */
export const mirroringLifecycle = (store: Store, clock: Clock): Lifecycle =>
  new Lifecycle({ store, clock, nudges: noNudges, firstAttemptDelayMs: 0, mirrors: async () => true });

/**
 * A mirror's options as the mirror suites set them: silent, its own lease owner, loopback hosts
 * allowed (the file server and s3rver), files up to 1 MiB; `extra` replaces any of them.
 */
export function mirrorOptions(
  deps: Pick<MirrorOptions, "store" | "clock" | "lifecycle" | "encryptionKey">,
  extra: Partial<MirrorOptions> = {},
): MirrorOptions {
  return {
    ...deps,
    logger: silentLogger,
    owner: new LeaseOwner(),
    allowPrivateNetworks: true,
    maxBytes: 1 << 20,
    ...extra,
  };
}

/**
 * A task of `clientId` that the upstream shows succeeded with `output`, recorded the way the poller
 * records it (Lifecycle.recordObservation on a claimed, submitted task).
 */
export async function succeedTask(
  store: Store,
  lifecycle: Lifecycle,
  clientId: string,
  output: unknown,
  now: number,
  callbackUrl: string | null = "http://127.0.0.1:9/hooks",
): Promise<TaskRow> {
  const id = newId("task", now + seq++);
  const { task } = await store.tasks.create({
    row: imageTaskRow(id, clientId, now, callbackUrl, ["task.succeeded", "task.failed", "task.canceled"]),
    needs: { waiting: false, credit: false },
    admit: () => 0,
  });
  const opts = { now, token: null, firstAttemptDelayMs: 0 };
  const submitted = await store.tasks.transition(
    task,
    { phase: "submitted", upstreamTaskId: `up-${id}`, submittedAt: now, nextRunAt: now },
    opts,
  );
  const [claimed] = await store.tasks.claimIds([submitted!.id], "submitted", {
    now,
    leaseMs: 30_000,
    token: `test:${id}`,
  });
  const remote = {
    id: `up-${id}`,
    status: "succeeded" as const,
    output,
    usage: { pointsCharged: 5, pointsRefunded: 0 },
    error: null,
    raw: {},
  };
  const after = await lifecycle.recordObservation(claimed!, `test:${id}`, remote, now + 60_000);
  return after!;
}

/**
 * A loopback proxy in front of the S3 server that can answer for it instead: what a bucket that
 * refuses (403) or breaks (500) looks like to the relay.
 */
export async function startBucketProxy(target: string) {
  const state: { fail: null | { status: number; code: string } } = { fail: null };
  const server = createServer((req, res) => {
    if (state.fail) {
      req.resume();
      res.writeHead(state.fail.status, { "Content-Type": "application/xml" });
      res.end(
        `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${state.fail.code}</Code><Message>${state.fail.code} from the test proxy</Message></Error>`,
      );
      return;
    }
    const url = new URL(req.url ?? "/", target);
    const upstream = request(url, { method: req.method, headers: req.headers }, (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
    });
    upstream.on("error", () => res.destroy());
    req.pipe(upstream);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    state,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
