// Mirror row: copy throughput (MB/s) of genrelay's copy (guarded fetch -> sha256/limit -> lib-storage
// multipart upload) against a plain fetch -> PutObject pipe, in the same run, into a real s3rver on
// loopback; and the peak RSS of the copying process while it copies a 200 MB file.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import S3rver from "s3rver";
import { BENCH } from "./lib/proc.mjs";

function chunk(i) {
  const buf = Buffer.alloc(64 * 1024);
  for (let o = 0; o < buf.length; o += 4) buf.writeUInt32LE((i * 2654435761 + o) >>> 0, o);
  return buf;
}

/** Streams SIZE bytes (never held whole) with a Content-Length. */
function fileServer(SIZE) {
  const server = createServer(async (req, res) => {
    // ?chunked: no Content-Length, so genrelay's copy goes multipart.
    res.writeHead(
      200,
      req.url?.includes("chunked")
        ? { "Content-Type": "video/mp4" }
        : { "Content-Type": "video/mp4", "Content-Length": String(SIZE) },
    );
    for (let i = 0, left = SIZE; left > 0; i++) {
      const part = chunk(i % 64).subarray(0, Math.min(left, 64 * 1024));
      left -= part.length;
      if (!res.write(part)) await new Promise((r) => res.once("drain", r));
    }
    res.end();
  });
  return new Promise((r) => server.listen(0, "127.0.0.1", () => r(server)));
}

export async function benchMirror({ log, rounds = 2, size = 200 * 1000 * 1000 }) {
  const SIZE = size;
  const dir = mkdtempSync(join(tmpdir(), "genrelay-bench-s3-"));
  const s3 = new S3rver({
    address: "127.0.0.1",
    port: 0,
    silent: true,
    directory: dir,
    configureBuckets: [{ name: "bench" }],
  });
  const { port } = await s3.run();
  const files = await fileServer(SIZE);
  const source = `http://127.0.0.1:${files.address().port}/file.mp4`;
  const endpoint = `http://127.0.0.1:${port}`;
  const runs = [];
  try {
    for (let round = 0; round < rounds; round++) {
      // Alternating order, so neither side always meets a warmer disk cache.
      for (const side of round % 2 === 0
        ? ["plain", "genrelay", "genrelay_multipart"]
        : ["genrelay_multipart", "genrelay", "plain"]) {
        const mode = side === "plain" ? "plain" : "genrelay";
        const url = side === "genrelay_multipart" ? `${source}?chunked` : source;
        // Asynchronous: this process serves the file and runs the bucket while the child copies.
        const { stdout: out } = await promisify(execFile)(
          process.execPath,
          [join(BENCH, "mirror-copy.mjs"), mode, url, endpoint, "bench", `r${round}-${side}`],
          { encoding: "utf8" },
        );
        const r = { ...JSON.parse(out.trim().split("\n").pop()), mode: side };
        runs.push(r);
        log(
          `  ${side.padEnd(18)} ${(r.bytes / 1e6).toFixed(0)} MB in ${r.seconds.toFixed(2)} s = ${r.mb_per_s.toFixed(1)} MB/s, peak RSS ${r.peak_rss_mb.toFixed(0)} MB (baseline ${r.baseline_rss_mb.toFixed(0)} MB)`,
        );
      }
    }
  } finally {
    files.close();
    await s3.close();
    rmSync(dir, { recursive: true, force: true });
  }
  const best = (mode) => runs.filter((r) => r.mode === mode).sort((a, b) => b.mb_per_s - a.mb_per_s)[0];
  const g = best("genrelay");
  const m = best("genrelay_multipart");
  const p = best("plain");
  return {
    method: `A ${SIZE / 1e6} MB file served by a loopback server, copied into s3rver on loopback by a fresh process each time: genrelay's copy (SSRF-guarded undici fetch, sha256 and size limit, one streamed PutObject when the length is known; genrelay_multipart: no Content-Length, @aws-sdk/lib-storage multipart, 8 MiB parts, 2 in flight) against a plain fetch -> PutObject pipe (one request, ContentLength given). Best of ${rounds} per side; peak RSS sampled every 20 ms in the copying process.`,
    size_mb: SIZE / 1e6,
    genrelay_mb_per_s: Math.round(g.mb_per_s * 10) / 10,
    plain_mb_per_s: Math.round(p.mb_per_s * 10) / 10,
    ratio: Math.round((g.mb_per_s / p.mb_per_s) * 100) / 100,
    genrelay_multipart_mb_per_s: Math.round(m.mb_per_s * 10) / 10,
    genrelay_peak_rss_mb: Math.round(Math.max(...runs.filter((r) => r.mode !== "plain").map((r) => r.peak_rss_mb))),
    plain_peak_rss_mb: Math.round(Math.max(...runs.filter((r) => r.mode === "plain").map((r) => r.peak_rss_mb))),
    // From before the SDK and the copy code are loaded: an upper bound on what the copy holds.
    genrelay_rss_growth_mb: Math.round(
      Math.max(...runs.filter((r) => r.mode !== "plain").map((r) => r.peak_rss_mb - r.baseline_rss_mb)),
    ),
    runs,
  };
}
