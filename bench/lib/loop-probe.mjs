// Loaded into a relay by the benchmark (`node --import <this file's URL> dist/main.js`, with
// LOOP_PROBE_FILE=<path>): it says what each late turn of the main thread was made of, so a reader can
// tell the relay's own work from the machine not running it. prom-client's loop max alone cannot.
//
// A 5 ms interval timer reads the main thread's /proc/self/task/<pid>/schedstat (ns on CPU, ns waiting
// on a runqueue) at each tick. When a tick comes more than LATE_MS after the previous one, the gap is a
// late turn, written as one JSON line: its wall time, the main thread's on-CPU time in it (the relay's
// own work), its runqueue wait (runnable, but the machine ran something else) and the rest (off-CPU
// sleep: synchronous I/O such as an fsync, or a wait on a lock or on GC helper threads). GC pauses of
// LATE_MS or more are written too, each with its start, so they can be placed inside a turn. Lines are
// gathered and appended every 500 ms (a few short writes per second while turns are late).
import { appendFileSync, readFileSync } from "node:fs";
import { PerformanceObserver, performance } from "node:perf_hooks";

const FILE = process.env.LOOP_PROBE_FILE;
const TICK_MS = 5;
const LATE_MS = 20;

if (FILE) {
  const statPath = `/proc/self/task/${process.pid}/schedstat`;
  const read = () => {
    const [cpu, wait] = readFileSync(statPath, "utf8").split(" ");
    return { cpu: Number(cpu) / 1e6, wait: Number(wait) / 1e6 };
  };
  const lines = [];
  const r1 = (x) => Math.round(x * 10) / 10;
  // hr: the monotonic clock in µs, the time base of a V8 CPU profile (`--cpu-prof`), so a late turn can
  // be cut out of a profile of the same process.
  const hr = () => Number(process.hrtime.bigint() / 1000n);
  let prev = { at: performance.now(), hr: hr(), ...read() };
  setInterval(() => {
    const now = { at: performance.now(), hr: hr(), ...read() };
    const gap = now.at - prev.at;
    if (gap > LATE_MS) {
      const cpu = now.cpu - prev.cpu;
      const wait = now.wait - prev.wait;
      lines.push(
        JSON.stringify({
          turn: 1,
          t: Date.now(),
          start: r1(prev.at),
          hr_start: prev.hr,
          hr_end: now.hr,
          gap_ms: r1(gap),
          cpu_ms: r1(cpu),
          runq_ms: r1(wait),
          off_ms: r1(Math.max(0, gap - cpu - wait)),
        }),
      );
    }
    prev = now;
  }, TICK_MS).unref();
  new PerformanceObserver((list) => {
    for (const e of list.getEntries())
      if (e.duration >= LATE_MS / 2)
        lines.push(
          JSON.stringify({ gc: e.detail?.kind ?? 0, t: Date.now(), start: r1(e.startTime), ms: r1(e.duration) }),
        );
  }).observe({ entryTypes: ["gc"] });
  const flush = () => {
    if (lines.length > 0) appendFileSync(FILE, `${lines.splice(0).join("\n")}\n`);
  };
  setInterval(flush, 500).unref();
  process.on("exit", flush);
}
