// What a relay's late turns were made of: `node bench/lib/late-turns.mjs <cpuprofile> <probe.jsonl> [min_cpu_ms]`.
// bench/big-outputs.mjs with BENCH_BIG_PROFILE=<dir> writes both: the main thread's V8 CPU profile and the
// loop probe's lines (bench/lib/loop-probe.mjs), whose hr_start/hr_end are on the profile's clock. For each
// late turn with at least min_cpu_ms (default 25) of CPU, the profile's samples inside it, summed by the
// callback that ran them (the frame under the profile's root: the loop phase's entry point), by the
// relay's outermost frames, and by the function that was on the CPU.
import { readFileSync } from "node:fs";

const [profileFile, probeFile, minCpu = "25"] = process.argv.slice(2);
if (!profileFile || !probeFile) {
  console.error("usage: node bench/lib/late-turns.mjs <cpuprofile> <probe.jsonl> [min_cpu_ms]");
  process.exit(2);
}
const profile = JSON.parse(readFileSync(profileFile, "utf8"));
const turns = readFileSync(probeFile, "utf8")
  .split("\n")
  .filter(Boolean)
  .map((l) => JSON.parse(l))
  .filter((l) => l.turn && l.hr_start && l.cpu_ms >= Number(minCpu) && l.start >= Number(process.env.FROM_MS ?? 0));

const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
const parentOf = new Map();
for (const n of profile.nodes) for (const c of n.children ?? []) parentOf.set(c, n.id);
const label = (n) => {
  const f = n.callFrame;
  const where = f.url ? ` ${f.url.split("/").slice(-2).join("/")}:${f.lineNumber + 1}` : "";
  return `${f.functionName || "(anonymous)"}${where}`;
};
/** A sample's stack, outermost first, without the root. */
const stackOf = (id) => {
  const out = [];
  for (let at = id; at !== undefined; at = parentOf.get(at)) out.push(nodes.get(at));
  return out.reverse().slice(1);
};
const samples = [];
let t = profile.startTime;
for (let i = 0; i < profile.samples.length; i++) {
  t += profile.timeDeltas[i];
  samples.push({ id: profile.samples[i], t });
}
const add = (m, k, v) => m.set(k, (m.get(k) ?? 0) + v);
const top = (m, n) =>
  [...m]
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(([k, v]) => `    ${(v / 1000).toFixed(1).padStart(6)} ms  ${k}`)
    .join("\n");

console.log(`${turns.length} late turns with >= ${minCpu} ms of CPU (FROM_MS: only turns starting after it)`);
const all = { byEntry: new Map(), byOuter: new Map(), bySelf: new Map(), busy: 0 };
const shown = turns.sort((a, b) => b.cpu_ms - a.cpu_ms);
for (const [i, turn] of shown.entries()) {
  const one = i < Number(process.env.TOP ?? 6);
  const byEntry = one ? new Map() : all.byEntry;
  const byOuter = one ? new Map() : all.byOuter;
  const bySelf = one ? new Map() : all.bySelf;
  let busy = 0;
  for (let i = 0; i < samples.length - 1; i++) {
    const s = samples[i];
    if (s.t < turn.hr_start || s.t >= turn.hr_end) continue;
    const dt = samples[i + 1].t - s.t;
    const stack = stackOf(s.id);
    if (stack.length === 1 && stack[0].callFrame.functionName === "(idle)") continue;
    busy += dt;
    add(byEntry, stack[0] ? label(stack[0]) : "(root)", dt);
    const relay = stack.filter((n) => n.callFrame.url.includes("/dist/"));
    add(byOuter, relay.slice(0, 3).map(label).join(" > ") || "(no relay frame)", dt);
    add(bySelf, label(stack.at(-1)), dt);
    if (one) {
      add(all.byEntry, stack[0] ? label(stack[0]) : "(root)", dt);
      add(all.byOuter, relay.slice(0, 3).map(label).join(" > ") || "(no relay frame)", dt);
      add(all.bySelf, label(stack.at(-1)), dt);
    }
  }
  all.busy += busy;
  if (!one) continue;
  console.log(
    `\n== turn at ${turn.start} ms: gap ${turn.gap_ms} ms, cpu ${turn.cpu_ms}, runq ${turn.runq_ms}, off ${turn.off_ms}; samples ${(busy / 1000).toFixed(1)} ms`,
  );
  console.log(
    `  by entry:\n${top(byEntry, 8)}\n  by outermost relay frames:\n${top(byOuter, 12)}\n  on CPU:\n${top(bySelf, 10)}`,
  );
}
console.log(
  `\n== all ${turns.length} turns together: samples ${(all.busy / 1000).toFixed(1)} ms\n  by entry:\n${top(all.byEntry, 12)}\n  by outermost relay frames:\n${top(all.byOuter, 25)}\n  on CPU:\n${top(all.bySelf, 25)}`,
);
