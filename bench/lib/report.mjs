// The results table: printed by bench/run.mjs, written as bench/results.md (README-ready), and
// regenerated from a results file with `node bench/run.mjs --report [results.json]`.
import { round } from "./stats.mjs";

export const pct = (x) => (x === null || x === undefined ? "—" : `${Math.round(x * 100)}%`);
export const num = (x) => (x === null || x === undefined ? "—" : Math.round(x).toLocaleString("en-US"));
export const mark = (met) => (met ? "✅ met" : "❌ not met");

export function tableRows(b) {
  const rows = [];
  const i = b.intake;
  rows.push([
    "Intake (accepted creations/s)",
    `${num(i.relay.rate)}/s, p50 ${i.relay.p50_ms} ms, p99 ${i.relay.p99_ms} ms (1st s ${num(i.relay.first_second)}/s, last s ${num(i.relay.last_second)}/s)`,
    `bare hono ${num(i.bare.rate)}/s, p50 ${i.bare.p50_ms} ms, p99 ${i.bare.p99_ms} ms`,
    pct(i.ratio),
    `≥ ${pct(i.goal)}`,
    mark(i.met && i.durable),
  ]);
  if (i.busy) {
    rows.push([
      "Intake while the workers submit, poll and deliver (50–100 ms upstream)",
      `${num(i.busy.relay.rate)}/s, p50 ${i.busy.relay.p50_ms} ms, p99 ${i.busy.relay.p99_ms} ms`,
      `bare hono ${num(i.bare.rate)}/s`,
      pct(i.busy.ratio),
      `≥ ${pct(i.busy.goal)}`,
      mark(i.busy.met && i.durable),
    ]);
  }
  const d = b.delivery;
  rows.push([
    "Delivery (signed webhooks/s)",
    `${num(d.relay.rate)}/s`,
    `raw undici ${num(d.raw.rate)}/s at ${d.concurrency.per_receiver} in flight (${num(d.raw_64.rate)}/s at 64)`,
    pct(d.ratio),
    `≥ ${pct(d.goal)}`,
    mark(d.met),
  ]);
  rows.push([
    "Delivery, Dispatcher in-process",
    `${num(d.dispatcher_in_process.rate)}/s`,
    `raw undici ${num(d.raw.rate)}/s`,
    pct(d.dispatcher_in_process.ratio),
    "(diagnostic)",
    "",
  ]);
  const e = b.end_to_end;
  rows.push([
    "End to end (tasks/s, 0 ms upstream)",
    `${num(e.tasks_per_s)}/s; completion→webhook p50 ${e.completion_to_webhook_ms.p50} / p95 ${e.completion_to_webhook_ms.p95} / p99 ${e.completion_to_webhook_ms.p99} ms${e.cpu_ms_per_task !== undefined ? `; ${e.cpu_ms_per_task} CPU-ms/task` : ""}`,
    `creation→webhook p50 ${e.creation_to_webhook_ms.p50} / p95 ${e.creation_to_webhook_ms.p95} / p99 ${e.creation_to_webhook_ms.p99} ms`,
    "—",
    "(measured)",
    e.complete ? "" : "❌ incomplete",
  ]);
  const g = b.postgres;
  if (g) {
    const sqliteIntake = b.intake?.relay?.rate;
    const durable = g.settings
      ? ` (fsync=${g.settings.fsync}, synchronous_commit=${g.settings.synchronous_commit})`
      : " (fsync=off, synchronous_commit=off: NOT durable)";
    rows.push([
      `PostgreSQL intake, 1 instance${durable}`,
      `${num(g.intake_1.rate)}/s, p50 ${g.intake_1.p50_ms} ms, p99 ${g.intake_1.p99_ms} ms`,
      sqliteIntake ? `SQLite relay ${num(sqliteIntake)}/s` : "—",
      sqliteIntake ? pct(g.intake_1.rate / sqliteIntake) : "—",
      "(measured)",
      g.durable ? "" : "❌ a 201 without its row",
    ]);
    rows.push([
      "PostgreSQL intake, 2 instances on one database",
      `${num(g.intake_2.rate)}/s`,
      `1 instance ${num(g.intake_1.rate)}/s`,
      pct(g.scaling),
      "(measured)",
      "",
    ]);
    rows.push([
      "PostgreSQL delivery, 1 instance (signed webhooks/s)",
      `${num(g.delivery.rate)}/s`,
      b.delivery ? `SQLite relay ${num(b.delivery.relay.rate)}/s` : "—",
      b.delivery ? pct(g.delivery.rate / b.delivery.relay.rate) : "—",
      "(measured)",
      g.complete ? "" : "❌ incomplete",
    ]);
  }
  rows.push(...prototypeRows(b.prototypes));
  rows.push(...scaleoutRows(b.scaleout));
  rows.push(...etaRows(b.eta));
  if (b.queues) rows.push(...queuesRows(b.queues));
  const m = b.memory;
  rows.push([
    `Memory (RSS, ${num(m.waiting)} waiting + ${num(m.in_flight)} in flight)`,
    `${num(m.rss_mb)} MB (peak ${num(m.peak_rss_mb)} MB)`,
    `at start ${num(m.start_rss_mb)} MB`,
    "—",
    `≤ ${m.goal_mb} MB`,
    mark(m.met),
  ]);
  const s = b.scale;
  rows.push([
    `Intake with ${num(s.rows)} finished tasks`,
    `${num(s.seeded.rate)}/s, p99 ${s.seeded.p99_ms} ms`,
    `empty database ${num(s.empty.rate)}/s`,
    pct(s.ratio),
    `≥ ${pct(s.goal)}`,
    mark(s.met),
  ]);
  const ps = b.poll_scheduling;
  if (ps?.rows?.length) {
    const most = Math.max(...ps.rows.map((r) => r.in_flight));
    const a = ps.rows.find((r) => r.in_flight === most && r.strategy === "adaptive");
    const rr = ps.rows.find((r) => r.in_flight === most && r.strategy === "round-robin");
    if (a && rr) {
      rows.push([
        `Poll scheduling, ${most} in flight (fake time)`,
        `adaptive: ${a.reads_per_finished_task} reads/task, completion→event p50 ${round(a.p50_completion_to_event_ms / 1000, 2)} s`,
        `round-robin: ${rr.reads_per_finished_task} reads/task, p50 ${round(rr.p50_completion_to_event_ms / 1000, 1)} s`,
        "—",
        "(measured)",
        "",
      ]);
    }
  }
  const l = b.latency;
  if (l?.completion_to_webhook_ms) {
    const c = l.completion_to_webhook_ms;
    const s1 = (ms) => (ms === null || ms === undefined ? "—" : `${round(ms / 1000, 1)} s`);
    const floor = l.floors?.[0];
    rows.push([
      `Completion→webhook, ${num(l.tasks)} in flight, ${l.config.reads_per_minute} reads/min (real time)`,
      `p50 ${s1(c.p50)} / p95 ${s1(c.p95)} / max ${s1(c.max)}; ${l.reads.per_task} reads/task; busiest minute ${l.reads.busiest_minute}/${l.reads.budget} reads${l.complete ? "" : `; ${l.missing} webhook(s) MISSING`}`,
      floor
        ? `floor: a full pass is ${floor.reads_per_sweep} reads = ${floor.floor_s} s (p95 ≈ ${round(floor.floor_s * 0.95, 1)} s)`
        : "—",
      "—",
      `p95 ≤ ${s1(l.goal.p95_ms)}, ≤ ${l.goal.busiest_minute_max} reads/min`,
      l.reads.budget_ok ? mark(l.met) : "❌ BUDGET EXCEEDED",
    ]);
  }
  rows.push(...fairnessRows(b.fairness));
  const q = b.query_plans;
  if (q) {
    rows.push([
      "Hot query plans",
      `${q.queries.length} statements, ${q.full_scans.length} full table scan(s)${q.full_scans.length ? ` (${q.full_scans.flatMap((f) => Object.entries(f.rows ?? {}).map(([t, n]) => `${t}: ${num(n)} row${n === 1 ? "" : "s"}`)).join(", ")})` : ""}${q.slowest_with_backlog?.[0] ? `; slowest with backlog: ${q.slowest_with_backlog[0].name.split(" ")[0]} ${q.slowest_with_backlog[0].ms} ms` : ""}`,
      `${num(q.task_rows)} task rows`,
      "—",
      "no full scans",
      q.full_scans.length === 0 ? "✅ met" : "❌ not met",
    ]);
  }
  const cp = b.mirror;
  if (cp && !cp.error) {
    rows.push([
      `Output copy into a bucket (${cp.size_mb} MB, s3rver)`,
      `${cp.genrelay_mb_per_s} MB/s (multipart, no length: ${cp.genrelay_multipart_mb_per_s} MB/s); peak RSS ${cp.genrelay_peak_rss_mb} MB`,
      `plain fetch → PutObject ${cp.plain_mb_per_s} MB/s; peak RSS ${cp.plain_peak_rss_mb} MB`,
      pct(cp.ratio),
      "memory bounded (not the file's size)",
      cp.genrelay_rss_growth_mb < cp.size_mb ? "✅ met" : "❌ not met",
    ]);
  }
  const pr = b.public_routes;
  if (pr?.new) {
    const side = (x) =>
      `JWKS ${x.jwks_cpu_ms} ms, file link ${x.file_cpu_ms} ms, refused ${x.refused_cpu_ms} ms CPU/request; victim completion→webhook ${x.victim_ms_alone} ms alone, ${x.victim_ms_flood} ms under ${num(pr.flood)} anonymous requests`;
    rows.push([
      "Public routes (JWKS, file link) per request, and a victim under a flood of them",
      side(pr.new),
      pr.old ? `old build: ${side(pr.old)}` : "—",
      pr.old ? `JWKS ×${pr.jwks_ratio}, file link ×${pr.file_ratio}` : "—",
      "a fraction of the old CPU per redirect; the flood refused (429), the victim's reads all 200",
      pr.old && pr.file_ratio < 0.5 && (pr.new.flood_statuses?.["429"] ?? 0) >= pr.flood - 200
        ? "✅ met"
        : "❌ not met",
    ]);
  }
  return rows;
}

/** bench/scaleout.mjs: relay + PostgreSQL CPU per unit at 1, 2, 3 instances; the old build and the prototype beside it when measured. */
function scaleoutRows(x) {
  if (!x?.new) return [];
  const names = { delivery: "webhook", intake: "creation", end_to_end: "task end to end" };
  const rows = [];
  for (const [kind, unit] of Object.entries(names)) {
    const k = x.new[kind];
    if (!k) continue;
    const ns = Object.keys(k.instances);
    const top = ns[ns.length - 1];
    const ratio = k[`ratio_${top}_to_1`];
    const cell = (c) =>
      `${cpu(c.cpu_ms_per_unit)} (${num(c.rate)}/s${c.mean_sessions_waiting ? `, ${c.mean_sessions_waiting} waiting on locks` : ""})`;
    const beside = (label, b) =>
      `${label}: ${ns.map((n) => `${n}: ${cpu(b.instances[n]?.cpu_ms_per_unit)}`).join("; ")}, ${times(b[`ratio_${top}_to_1`])}`;
    // The old build and the prototype (BENCH_SCALEOUT_PROTO=1, intake only), when measured in the same run.
    const baselines = [
      x.old?.[kind] && beside("old build", x.old[kind]),
      x.proto?.[kind] && beside("prototype", x.proto[kind]),
    ].filter(Boolean);
    rows.push([
      `PostgreSQL scale-out, relay + server CPU per ${unit}, ${ns.join("/")} instances`,
      ns.map((n) => `${n}: ${cell(k.instances[n])}`).join("; "),
      baselines.length > 0 ? baselines.join("; ") : "1 instance",
      times(ratio),
      `≤ ${x.goal}×`,
      mark(k.met),
    ]);
  }
  return rows;
}

/** bench/eta.mjs: estimated_completion_at's error as a share of the real remaining time. */
function etaRows(x) {
  if (!x?.rows) return [];
  const by = Object.fromEntries(x.rows.map((r) => [r.estimates, r]));
  const show = (r) => (r ? `median ${pct(r.median_error_share)}, p90 ${pct(r.p90_error_share)}` : "—");
  return [
    [
      "estimated_completion_at error (share of the real remaining time, simulator)",
      `all: ${show(by.all)}`,
      `waiting: ${show(by.waiting)}; running: ${show(by.running)}`,
      "—",
      "(measured)",
      "",
    ],
  ];
}

const cpu = (x) => (x === null || x === undefined ? "—" : `${round(x, 2)} CPU-ms`);
const times = (x) => (x === null || x === undefined ? "—" : `${round(x, 1)}×`);

/** A row refused for the machine's load (bench/lib/load-gate.mjs): its name and why, no figures. */
const refusedRow = (name, x) => [name, x.refused, "—", "—", "—", "refused"];

/** bench/prototypes.mjs: the relay against minimal prototypes of the same durable work, same run (the rows measured). */
export function prototypeRows(p) {
  if (!p) return [];
  const rows = [];
  const i = p.intake;
  const intakeName = "Intake vs minimal prototype (SQLite, synchronous=FULL)";
  if (i?.refused) rows.push(refusedRow(intakeName, i));
  else if (i)
    rows.push([
      intakeName,
      `${num(i.relay.rate)}/s, ${cpu(i.relay.cpu_ms_per_request)}/request`,
      `prototype ${num(i.prototype.rate)}/s, ${cpu(i.prototype.cpu_ms_per_request)}/request (relay ${times(i.cpu_ratio)} the CPU)`,
      pct(i.ratio),
      `≥ ${pct(i.goal)}`,
      mark(i.met && i.durable),
    ]);
  const d = p.delivery;
  const deliveryName = "Delivery vs minimal prototype (signed webhooks/s, 8 in flight)";
  if (d?.refused) rows.push(refusedRow(deliveryName, d));
  else if (d)
    rows.push([
      deliveryName,
      `${num(d.relay.rate)}/s, ${cpu(d.relay.cpu_ms_per_webhook)}/webhook`,
      `prototype ${num(d.prototype.rate)}/s, ${cpu(d.prototype.cpu_ms_per_webhook)}/webhook (relay ${times(d.cpu_ratio)} the CPU)`,
      pct(d.ratio),
      `≥ ${pct(d.goal)}`,
      mark(d.met && d.complete),
    ]);
  const e = p.end_to_end;
  const e2eName = `CPU per task end to end vs prototype path (${num(e?.tasks)} tasks, 0 ms upstream)`;
  if (e?.refused) rows.push(refusedRow(e2eName, e));
  else if (e)
    rows.push([
      e2eName,
      `${cpu(e.relay.cpu_ms_per_task)}/task (${num(e.relay.tasks_per_s)} tasks/s)`,
      `prototype ${cpu(e.prototype.cpu_ms_per_task)}/task (${num(e.prototype.tasks_per_s)} tasks/s)`,
      times(e.cpu_ratio),
      `≤ ${e.goal}×`,
      e.complete ? mark(e.met) : "❌ incomplete",
    ]);
  const g = p.postgres;
  const pgName = g?.settings
    ? `PostgreSQL intake vs prototype (fsync=${g.settings.fsync}, synchronous_commit=${g.settings.synchronous_commit})`
    : "PostgreSQL intake vs prototype";
  if (g?.refused) rows.push(refusedRow(pgName, g));
  else if (g)
    rows.push([
      pgName,
      `${num(g.relay.rate)}/s, ${cpu(g.relay.cpu_ms_per_request)} + ${cpu(g.relay.db_cpu_ms_per_request)} in PostgreSQL /request`,
      `multi-row INSERT per tick ${num(g.batch.rate)}/s (${cpu(g.batch.cpu_ms_per_request)} + ${cpu(g.batch.db_cpu_ms_per_request)}; relay + server ${times(g.cpu_ratio)} the CPU); INSERT … ON CONFLICT per request ${num(g.conflict.rate)}/s (${pct(g.ratio_conflict)})`,
      pct(g.ratio),
      `≥ ${pct(g.goal)}`,
      mark(g.met && g.durable),
    ]);
  return rows;
}

/** bench/fairness.mjs: the victim's delay under slow receivers, and partly working receivers; "before" = BENCH_FAIRNESS_OLD_DIST's build. */
function fairnessRows(f) {
  if (!f?.slow_receivers?.current) return [];
  const rows = [];
  const ms = (d) => `p50 ${num(d.p50)} / p95 ${num(d.p95)} / max ${num(d.max)} ms`;
  const old = f.slow_receivers.old ?? [];
  for (const r of f.slow_receivers.current) {
    const o = old.find((x) => x.attack_tasks === r.attack_tasks);
    rows.push([
      `Another client's webhook while one has ${num(r.attack_tasks)} tasks on ${f.config.slow.hosts} receivers answering after ${f.config.slow.delayMs / 1000} s (real time)`,
      `due→arrival ${ms(r.victim_delivery_ms)}; slow client ≤ ${r.attacker_max_in_flight} in flight${r.complete ? "" : `; ${r.victim_tasks - r.victim_delivered} MISSING`}`,
      o ? `before #21: ${ms(o.victim_delivery_ms)}; ≤ ${o.attacker_max_in_flight} in flight` : "—",
      "—",
      "≤ 1 s after due",
      mark(r.complete && r.victim_delivery_ms.max !== null && r.victim_delivery_ms.max <= 1_000),
    ]);
  }
  const oldP = f.partly_working.old ?? {};
  const pending = (r) =>
    Object.entries(r.pending_at)
      .map(([k, v]) => `${v ?? "?"} pending at ${k}`)
      .join(", ");
  const last = (r) =>
    r.last_webhook_after_completion_s === null
      ? "none delivered"
      : `last webhook ${r.last_webhook_after_completion_s} s after completion`;
  for (const [mode, r] of Object.entries(f.partly_working.current ?? {})) {
    const o = oldP[mode];
    const first = Object.keys(r.pending_at)[0];
    rows.push([
      `Receiver that ${r.mode}, ${r.tasks} tasks, retries every 1 s (real time)`,
      `${r.delivered}/${r.tasks}; ${last(r)}; ${pending(r)}${r.exhausted ? `; ${r.exhausted} exhausted` : ""}`,
      o ? `before #21: ${o.delivered}/${o.tasks}; ${last(o)}; ${pending(o)}` : "—",
      "—",
      `none pending at ${first}`,
      mark(r.pending_at[first] === 0),
    ]);
  }
  return rows;
}

/** " Measured <date> UTC, commit <sha>, …, with `<command>`." for a row merged by BENCH_ONLY, else "". */
function measuredText(m) {
  if (!m) return "";
  return ` Measured ${m.date.slice(0, 16).replace("T", " ")} UTC, commit ${m.git?.commit?.slice(0, 10) ?? "?"}${m.git?.dirty ? " (uncommitted changes)" : ""}, load average at end ${m.load_average_at_end.join(", ")}, with \`${m.command}\`.`;
}

export function markdown(results, rows) {
  const head = ["benchmark", "genrelay", "baseline (same run)", "ratio", "goal", ""];
  const lines = [
    `| ${head.join(" | ")} |`,
    `|${head.map(() => "---").join("|")}|`,
    ...rows.map((r) => `| ${r.map((c) => String(c).replace(/\|/g, "\\|")).join(" | ")} |`),
  ];
  const m = results.machine;
  lines.push(
    "",
    `${results.quick ? "QUICK run (smoke test sizes, not figures). " : ""}Medians of ${results.config.rounds} round(s); ${m.cpus} × ${m.model}, ${m.memory_gb} GB, Node ${results.node}, ${results.date.slice(0, 10)}, commit ${results.git.commit?.slice(0, 10) ?? "?"}${results.git.dirty ? " (uncommitted changes)" : ""}; load average at start ${m.load_average_at_start.join(", ")}, at end ${results.load_average_at_end.join(", ")}. \`npm run bench\` took ${Math.round(results.duration_s)} s. A ratio is the median of the per-round ratios (each round measures a figure and its baseline back to back), so it need not equal the ratio of the two medians shown; the machine was shared, and the per-round figures in \`bench/results.json\` show the spread.`,
  );
  const b = results.benchmarks;
  const c = results.config;
  lines.push(
    "",
    "How each figure is measured (details in `bench/results.json`):",
    "",
    `- **Intake**: autocannon, ${c.intake.connections} connections, ${c.intake.duration ? `${c.intake.duration} s` : `${c.intake.amount} requests`} per measurement after ${c.intake.warmup} s of warm-up, a fresh \`Idempotency-Key\` per request; only 201s count, and every 201 is checked to be a committed row${b.intake.durable ? " (all were)" : " (SOME WERE NOT)"}. The upstream is held at one running task, so accepted tasks wait in the relay (a burst). Baseline: a bare hono endpoint on @hono/node-server that parses the body and answers 201.`,
    `- **Delivery**: ${c.delivery.events} \`task.succeeded\` events (${b.delivery.body_bytes} bytes) already in the outbox when the relay starts; signed webhooks per second arriving at a loopback node:http receiver (all events or the first ${c.delivery.windowS} s). Baseline: undici.request through a keep-alive Agent at the relay's own concurrency towards one receiver (${b.delivery.concurrency.per_receiver} in flight), same body, no signing or database. "Dispatcher in-process" is dist's Dispatcher alone on the same outbox.`,
    `- **End to end**: ${c.e2e.duration ? `${c.e2e.duration} s` : `${c.e2e.amount} requests`} of creations with a loopback \`callback_url\`, simulator at 0 ms and no read limit; tasks/s = webhooks / (last webhook − first request). completion→webhook uses the relay's \`data.completed_at\`; creation→webhook includes the poller's first read (2 s after submission for images).`,
    `- **Memory**: VmRSS of the relay process with ${num(b.memory.waiting)} tasks waiting and ${num(b.memory.in_flight)} submitted to a simulator whose tasks take a day (steady state over 5 s; peak = VmHWM, reached while submitting).`,
    `- **Scale**: the intake measurement on a database pre-loaded with ${num(b.scale.rows)} finished tasks, in the same rounds as the empty one.`,
    ...(b.postgres ? [`- **PostgreSQL**: ${b.postgres.method}${measuredText(b.postgres.measured)}`] : []),
  );
  if (b.scaleout?.method)
    lines.push(`- **PostgreSQL scale-out**: ${b.scaleout.method}${measuredText(b.scaleout.measured)}`);
  if (b.eta?.method) lines.push(`- **estimated_completion_at**: ${b.eta.method}${measuredText(b.eta.measured)}`);
  if (b.queues?.method) lines.push(`- **Queue destinations**: ${b.queues.method}${measuredText(b.queues.measured)}`);
  const p = b.prototypes;
  if (p?.method) lines.push(`- **Against minimal prototypes (bench/proto/)**: ${p.method}${measuredText(p.measured)}`);
  const l = b.latency;
  if (l?.config) {
    const lc = l.config;
    const when = l.measured
      ? ` Measured ${l.measured.date.slice(0, 16).replace("T", " ")} UTC, commit ${l.measured.git?.commit?.slice(0, 10) ?? "?"}, load average at end ${l.measured.load_average_at_end.join(", ")}, with \`${l.measured.command}\`.`
      : "";
    lines.push(
      `- **Completion→webhook (real time)**: the simulator and the relay as separate processes, ${num(l.tasks)} tasks created at once (half images, half videos), upstream durations ${(lc.queuedMs + lc.processingMinMs) / 1000}–${(lc.queuedMs + lc.processingMaxMs) / 1000} s, ${lc.failureRate * 100}% failing, the simulator enforcing ${lc.upstream_read_limit} reads/min and the relay at UPSTREAM_READS_PER_MINUTE=${lc.reads_per_minute}. Latency = webhook arrival at a loopback receiver − the task's completion instant in the simulator (\`/_sim/tasks\`); detection p50/p95 ${l.detection_ms.p50}/${l.detection_ms.p95} ms, delivery p50/p95 ${l.delivery_ms.p50}/${l.delivery_ms.p95} ms. Reads are the simulator's own count (\`/_sim/reads\`): ${l.reads.list} list + ${l.reads.single} single, ${l.reads.rate_limited} refused; busiest 60 s window ${l.reads.busiest_minute} (the run fails above ${l.reads.budget}). Takes ${Math.round(l.run_seconds)} s of wall time.${when}`,
    );
  }
  const f = b.fairness;
  if (f?.method) {
    const when = f.measured
      ? ` Measured ${f.measured.date.slice(0, 16).replace("T", " ")} UTC, commit ${f.measured.git?.commit?.slice(0, 10) ?? "?"}, load average at end ${f.measured.load_average_at_end.join(", ")}, with \`${f.measured.command}\`.`
      : "";
    lines.push(`- **Fairness and partly working receivers (real time)**: ${f.method}${when}`);
  }
  const q = results.benchmarks.query_plans;
  if (q?.full_scans.length) {
    lines.push("", "Full table scans in hot queries (EXPLAIN QUERY PLAN):", "");
    for (const s of q.full_scans) {
      const size = Object.entries(s.rows ?? {})
        .map(([t, n]) => `${t} had ${num(n)} row${n === 1 ? "" : "s"}`)
        .join(", ");
      lines.push(`- ${s.phase}: \`${s.name}\` — ${s.plan.join("; ")}${size ? ` (${size})` : ""}`);
    }
  }
  if (q?.slowest_with_backlog?.length) {
    const ph = q.backlog?.phases ?? {};
    lines.push(
      "",
      `Slowest hot statements with ${num(ph.waiting ?? 0)} tasks waiting and ${num(ph.submitted ?? 0)} in flight (median ms per execution):`,
      "",
    );
    for (const s of q.slowest_with_backlog.slice(0, 6))
      lines.push(`- ${s.phase}: \`${s.name}\` ${s.ms} ms — ${s.plan.join("; ")}`);
  }
  return `${lines.join("\n")}\n`;
}

export function printTable(rows, log = (line) => process.stdout.write(`${line}\n`)) {
  const head = ["benchmark", "genrelay", "baseline (same run)", "ratio", "goal", ""];
  const all = [head, ...rows].map((r) => r.map(String));
  const widths = head.map((_, c) => Math.min(70, Math.max(...all.map((r) => r[c].length))));
  const fmt = (r) => r.map((cell, c) => cell.padEnd(widths[c])).join("  ");
  log("");
  log(fmt(head));
  log(widths.map((w) => "-".repeat(w)).join("  "));
  for (const r of rows) log(fmt(r));
}

/** bench/queues.mjs: each queue kind against its broker's own client. */
export function queuesRows(q) {
  const rows = [];
  for (const [kind, k] of Object.entries(q.kinds)) {
    const old = k.old ? `; old build ${Math.round(k.old.rate)}/s, ${k.old.cpu_ms_per_message} CPU-ms/msg` : "";
    rows.push([
      `Queue destination ${kind} (messages/s confirmed by the broker, ${q.in_flight} in flight)`,
      `${Math.round(k.relay.rate)}/s, ${k.relay.cpu_ms_per_message} CPU-ms/msg (${k.relay.cpu_over_raw}× raw); task.succeeded→consumer p50 ${k.latency_ms.relay.p50} / p95 ${k.latency_ms.relay.p95} ms${old}`,
      `raw client ${Math.round(k.raw.rate)}/s, ${k.raw.cpu_ms_per_message} CPU-ms/msg${k.proto ? `; durable prototype ${Math.round(k.proto.rate)}/s, ${k.proto.cpu_ms_per_message} CPU-ms/msg (${k.proto.cpu_over_raw}× raw, relay ${k.relay.cpu_over_proto}× prototype)` : ""}`,
      `${k.relay.raw_over_relay}× slower`,
      "≤ 2×",
      k.relay.raw_over_relay <= 2 && k.relay.complete ? "✅ met" : "❌ not met",
    ]);
  }
  return rows;
}
