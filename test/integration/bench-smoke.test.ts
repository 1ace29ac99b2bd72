import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

// The benchmarks run against the build; `npm test` builds before running vitest. This only checks
// that every benchmark script still starts and reports (BENCH_QUICK: a handful of requests, one
// round, relays and servers shared between measurements where the figure is not kept); no figures
// are checked and no real benchmark runs in the test suite. The quick run costs about 70 s of CPU
// (relay starts, PostgreSQL, three brokers) and waits on real time (latency, fairness, mirror rows):
// about 120 s on a 2-core machine at load 4, 240 s and more at load 10 (docs/testing.md, "Time").
// So the run is bounded by its progress, not by the clock: it prints a line as each row starts and
// as each measurement ends, and it is stopped (SIGTERM, then SIGKILL) when it prints nothing for
// STALL_MS. The test's own timeout only catches a run that keeps printing and never ends.
const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const RUN = join(ROOT, "bench", "run.mjs");
const MAIN = join(ROOT, "dist", "main.js");
const STALL_MS = 120_000;

/** Runs bench/run.mjs, stopping it once it has printed nothing for STALL_MS. */
function runBench(env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [RUN], { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    let stalled = false;
    let lastOutput = Date.now();
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
      lastOutput = Date.now();
    });
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
      lastOutput = Date.now();
    });
    const watchdog = setInterval(() => {
      if (stalled || Date.now() - lastOutput < STALL_MS) return;
      stalled = true;
      stderr += `\n[bench-smoke] no output for ${STALL_MS / 1000} s: stopped\n`;
      child.kill("SIGTERM");
      setTimeout(() => child.kill("SIGKILL"), 15_000).unref();
    }, 1_000);
    child.once("close", (code) => {
      clearInterval(watchdog);
      resolve({ code: stalled ? null : code, stdout, stderr });
    });
  });
}

describe.skipIf(!existsSync(MAIN))("npm run bench (BENCH_QUICK smoke run)", () => {
  const dir = mkdtempSync(join(tmpdir(), "genrelay-bench-smoke-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("runs every benchmark on a tiny scale, exits 0 and writes results with the expected keys", async () => {
    const out = join(dir, "results.json");
    const committed = join(ROOT, "bench", "results.json");
    const committedBefore = existsSync(committed) ? statSync(committed).mtimeMs : null;
    const { code, stdout, stderr } = await runBench({ PATH: process.env.PATH ?? "", BENCH_QUICK: "1", BENCH_OUT: out });
    expect(code, `bench/run.mjs failed:\n${stdout.slice(-3000)}\n${stderr.slice(-3000)}`).toBe(0);
    // A quick run never overwrites the real figures.
    expect(existsSync(committed) ? statSync(committed).mtimeMs : null).toBe(committedBefore);

    const results = JSON.parse(readFileSync(out, "utf8"));
    expect(results.quick).toBe(true);
    expect(results).toMatchObject({
      node: process.version,
      machine: { cpus: expect.any(Number), model: expect.any(String), memory_gb: expect.any(Number) },
      git: { commit: expect.anything() },
    });
    expect(Number.isNaN(Date.parse(results.date))).toBe(false);

    const b = results.benchmarks;
    expect(Object.keys(b)).toEqual(
      expect.arrayContaining(["intake", "delivery", "end_to_end", "memory", "scale", "query_plans"]),
    );
    expect(b.intake).toMatchObject({
      bare: { rate: expect.any(Number) },
      relay: { rate: expect.any(Number) },
      ratio: expect.any(Number),
      goal: 0.5,
    });
    expect(b.intake.durable).toBe(true);
    expect(b.intake.relay.rate).toBeGreaterThan(0);
    expect(b.delivery).toMatchObject({
      raw: { rate: expect.any(Number) },
      relay: { rate: expect.any(Number) },
      ratio: expect.any(Number),
      goal: 0.6,
    });
    expect(b.delivery.signature_verified).toBe(true);
    expect(b.delivery.dispatcher_in_process.rate).toBeGreaterThan(0);
    expect(b.end_to_end).toMatchObject({ tasks_per_s: expect.any(Number), complete: true });
    expect(b.end_to_end.completion_to_webhook_ms).toMatchObject({
      p50: expect.any(Number),
      p95: expect.any(Number),
      p99: expect.any(Number),
    });
    expect(b.memory).toMatchObject({ rss_mb: expect.any(Number), goal_mb: 200, reached: true });
    expect(b.scale).toMatchObject({
      empty: { rate: expect.any(Number) },
      seeded: { rate: expect.any(Number) },
      ratio: expect.any(Number),
      goal: 0.8,
    });
    expect(b.query_plans.queries.length).toBeGreaterThan(5);
    expect(b.query_plans.queries.map((q: { phase: string }) => q.phase)).toEqual(
      expect.arrayContaining(["intake", "list", "submitter", "dispatcher"]),
    );
    expect(b.poll_scheduling.rows.length).toBeGreaterThan(0);
    // The real-time latency row, small variant: every task called back, the read budget held.
    expect(b.latency).toMatchObject({
      complete: true,
      signature_verified: true,
      reads: { budget_ok: true, rate_limited: 0 },
    });
    expect(b.latency.completion_to_webhook_ms).toMatchObject({
      p50: expect.any(Number),
      p95: expect.any(Number),
      max: expect.any(Number),
    });
    expect(b.latency.reads.busiest_minute).toBeLessThanOrEqual(100);
    expect(b.latency.floors.length).toBeGreaterThan(0);
    // The relay against the minimal prototypes (bench/proto/), and PostgreSQL measured with durable commits.
    const p = b.prototypes;
    expect(p.intake).toMatchObject({
      relay: { rate: expect.any(Number), cpu_ms_per_request: expect.any(Number) },
      prototype: { rate: expect.any(Number) },
      goal: 0.5,
      durable: true,
    });
    expect(p.delivery).toMatchObject({
      relay: { cpu_ms_per_webhook: expect.any(Number) },
      prototype: { rate: expect.any(Number) },
      complete: true,
    });
    expect(p.end_to_end).toMatchObject({
      relay: { cpu_ms_per_task: expect.any(Number) },
      prototype: { cpu_ms_per_task: expect.any(Number) },
      goal: 2,
      complete: true,
    });
    expect(p.postgres).toMatchObject({
      settings: { fsync: "on", synchronous_commit: "on" },
      batch: { rate: expect.any(Number) },
      conflict: { rate: expect.any(Number) },
      durable: true,
    });
    expect(b.postgres.settings).toEqual({ fsync: "on", synchronous_commit: "on" });
    // Scale-out on one PostgreSQL (1 and 2 instances in the quick run; 1, 2 and 3 in the full one, whose
    // ratio_3_to_1 is the goal's figure): relay + server CPU per unit, each count complete.
    expect(b.scaleout.settings).toEqual({ fsync: "on", synchronous_commit: "on" });
    for (const kind of ["delivery", "intake", "end_to_end"]) {
      for (const n of [1, 2])
        expect(b.scaleout.new[kind].instances[n]).toMatchObject({
          cpu_ms_per_unit: expect.any(Number),
          complete: true,
        });
      expect(b.scaleout.new[kind].ratio_2_to_1).toEqual(expect.any(Number));
    }
    // estimated_completion_at against the real end on the simulator.
    expect(b.eta.rows.map((r: { estimates: string }) => r.estimates)).toEqual(["waiting", "running", "all"]);
    // Public routes: one address's flood past its limit is refused, the victim's reads all answered.
    expect(b.public_routes.new.flood_statuses["429"]).toBeGreaterThan(0);
    expect(Object.keys(b.public_routes.new.victim_reads_flood)).toEqual(["200"]);
    expect(b.end_to_end.cpu_ms_per_task).toEqual(expect.any(Number));
    expect(results.table.length).toBeGreaterThanOrEqual(6);

    const md = readFileSync(join(dir, "results.md"), "utf8");
    expect(md).toContain("| benchmark |");
  }, 900_000);
});
