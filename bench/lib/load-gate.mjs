// The outside harness's rule for a shared machine (issue #43): every round of a row records the
// load average before and after it, and a round is measured only when the 1-minute load is at most
// BENCH_MAX_LOAD (default 1.5 on this 2-core machine). Past it the round waits up to
// BENCH_LOAD_WAIT_S (default 90 s: a benchmark's own previous round raises the 1-minute average by
// about 1, which decays in about a minute) and is then refused; a row with a refused round prints as
// refused, with the loads, rather than as a figure. BENCH_MAX_LOAD=inf measures whatever the load.
import { readFileSync } from "node:fs";
import { sleep } from "./proc.mjs";

const envNumber = (name, fallback) => {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return fallback;
  const n = raw === "inf" ? Number.POSITIVE_INFINITY : Number(raw);
  if (Number.isNaN(n)) throw new Error(`${name} must be a number (or inf), not ${raw}`);
  return n;
};

export const MAX_LOAD = envNumber("BENCH_MAX_LOAD", 1.5);
export const LOAD_WAIT_S = envNumber("BENCH_LOAD_WAIT_S", 90);

/** The 1-, 5- and 15-minute load averages from /proc/loadavg. */
export function loadAverage() {
  return readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).map(Number);
}

/**
 * Waits (polling every 5 s) until the 1-minute load is at most `max`, for up to `waitS` seconds.
 * Resolves with { ok, load }: ok false when the load stayed above `max` (the round is refused).
 */
export async function quietEnough({ max = MAX_LOAD, waitS = LOAD_WAIT_S, log = () => {} } = {}) {
  const deadline = Date.now() + waitS * 1000;
  let load = loadAverage();
  if (load[0] > max) log(`  load ${load[0]} > ${max} (BENCH_MAX_LOAD): waiting up to ${waitS} s`);
  while (load[0] > max && Date.now() < deadline) {
    await sleep(5_000);
    load = loadAverage();
  }
  return { ok: load[0] <= max, load };
}

/** "1.23" or "refused (load 4.5 > 1.5)": a row's figure, or why it has none. */
export function refusedText(loads, max = MAX_LOAD) {
  return `refused (1-minute load ${loads.map((l) => l.toFixed(2)).join(", ")} > ${max}, BENCH_MAX_LOAD)`;
}
