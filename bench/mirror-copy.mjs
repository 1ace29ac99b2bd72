// One copy of a file into a bucket, in a process of its own so its peak RSS is the copy's alone.
// argv: mode (genrelay | plain), source URL, S3 endpoint, bucket, key. Prints one JSON line.
import { distImport } from "./lib/dist.mjs";

const [mode, sourceUrl, endpoint, bucketName, key] = process.argv.slice(2);
const baseline = process.memoryUsage().rss;
let peak = baseline;
const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
const started = performance.now();
let bytes = 0;
if (mode === "genrelay") {
  const { Bucket } = await distImport("mirror/bucket.js");
  const { SourceFetcher } = await distImport("mirror/source.js");
  const { copyFile } = await distImport("mirror/copy.js");
  const config = {
    endpoint,
    bucket: bucketName,
    region: "us-east-1",
    prefix: "",
    accessKeyId: "S3RVER",
    secretAccessKey: "S3RVER",
    forcePathStyle: true,
    publicBaseUrl: null,
    urlExpiresIn: 3600,
  };
  const bucket = new Bucket(config, { allowPrivateNetworks: true });
  const source = new SourceFetcher({ allowPrivateNetworks: true, idleTimeoutMs: 30_000, maxBytes: 1024 ** 3 });
  const copied = await copyFile(source, bucket, {
    sourceUrl,
    taskId: key,
    n: 0,
    maxBytes: 1024 ** 3,
    signal: new AbortController().signal,
  });
  bytes = copied.bytes;
  bucket.close();
  await source.close();
} else {
  // The plain pipe: fetch's body handed to one PutObject with its length (no hashing, no limit, no guard).
  const { S3Client, PutObjectCommand } = await import("@aws-sdk/client-s3");
  const { Readable } = await import("node:stream");
  const client = new S3Client({
    endpoint,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" },
    requestChecksumCalculation: "WHEN_REQUIRED",
  });
  const res = await fetch(sourceUrl);
  bytes = Number(res.headers.get("content-length"));
  await client.send(
    new PutObjectCommand({
      Bucket: bucketName,
      Key: `${key}/plain`,
      Body: Readable.fromWeb(res.body),
      ContentLength: bytes,
    }),
  );
  client.destroy();
}
clearInterval(sampler);
const seconds = (performance.now() - started) / 1000;
process.stdout.write(
  `${JSON.stringify({ mode, bytes, seconds, mb_per_s: bytes / 1e6 / seconds, baseline_rss_mb: baseline / 1e6, peak_rss_mb: peak / 1e6 })}\n`,
);
process.exit(0);
