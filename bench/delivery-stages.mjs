// Where a delivered webhook's CPU goes by stage, inclusive, relay beside its prototype (issue #43,
// fourteenth round). One build's relay, then bench/proto/delivery.mjs, each under `node --cpu-prof`
// draining the same pre-written outbox (N due task.succeeded events of one client to one loopback
// receiver); only the samples taken after the first WARM webhooks arrived and before the last one
// count (steady state: V8's monotonic clock is the one process.hrtime reads). Each sample goes to
// the stage of the innermost frame of its stack that names one (the rules below, the relay's
// modules and the prototype's functions side by side); samples with no such frame go to the
// runtime's own rows (GC, node internals with no stage above them, the program). Prints µs a
// webhook per stage for both, and the relay's excess.
//   node bench/delivery-stages.mjs DIST [events=15000] [warm=5000]
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import { join, resolve } from "node:path";
import { loadAverage } from "./lib/load-gate.mjs";
import * as proc from "./lib/proc.mjs";
import { prepareSeeding, seedPendingEvents } from "./lib/seed.mjs";

const dist = resolve(process.argv[2] ?? "dist");
const EVENTS = Number(process.argv[3] ?? 15_000);
const WARM = Number(process.argv[4] ?? 5_000);
/** STAGES_DETAIL=N: also the N largest self times (stage | function) of each side. */
const DETAIL = Number(process.env.STAGES_DETAIL ?? 0);
const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-stages-"));

/**
 * Stage rules, innermost matching frame first: [stage, test(url, functionName, line)]. The prototype's
 * functions are named in bench/proto/delivery.mjs and common.mjs; the relay's by module.
 */
const RULES = [
  ["log", (u) => /\/dist\/logger\.js$/.test(u) || /node_modules\/pino/.test(u)],
  ["metrics, tracing", (u) => /\/dist\/(metrics|telemetry)\//.test(u) || /\/dist\/metrics\.js$/.test(u)],
  [
    "build: sign, headers, message",
    (u, f, line) =>
      /\/dist\/webhooks\/(sign|outgoing|signing-keys|callback-headers)\.js$/.test(u) ||
      /\/dist\/workers\/delivery\/message\.js$/.test(u) ||
      // The signer webhookSigner returns (anonymous).
      (/proto\/common\.mjs$/.test(u) && (/webhookSigner/.test(f) || (f === "" && line >= 350 && line <= 356))),
  ],
  [
    "record: queue, commit, statements",
    (u, f, line) =>
      /\/dist\/db\/sqlite\/(group-commit|paced-settles|wal-sync|events|tx|prepared|stored-bytes|savepoint|attempts)\.js$/.test(
        u,
      ) ||
      /\/dist\/core\/delivery\.js$/.test(u) ||
      (/proto\/(delivery|common)\.mjs$/.test(u) && /writeResults|record|perTurn|flush/.test(f)) ||
      // The transaction's body (db.transaction((results) => …), anonymous).
      (/proto\/delivery\.mjs$/.test(u) && f === "" && line >= 118 && line <= 146),
  ],
  [
    "claim, refill, lease-ahead",
    (u, f) =>
      /\/dist\/db\/sqlite\/(event-claims|release-leases)\.js$/.test(u) ||
      /\/dist\/workers\/delivery\/(refills|ahead|trials)\.js$/.test(u) ||
      /\/dist\/store\/lease-ahead\.js$/.test(u) ||
      (/proto\/delivery\.mjs$/.test(u) && /claimMore/.test(f)),
  ],
  ["send: undici", (u) => /node_modules\/undici/.test(u)],
  [
    "send: sender, destination, deadline",
    (u, f) =>
      /\/dist\/webhooks\/(sender|destination)\.js$/.test(u) ||
      /\/dist\/destinations\//.test(u) ||
      /\/dist\/net\//.test(u) ||
      /\/dist\/workers\/delivery\/traced\.js$/.test(u) ||
      (/proto\/delivery\.mjs$/.test(u) && /send|transport/.test(f)),
  ],
  [
    "attempt: breaker, outcome",
    (u) => /\/dist\/workers\/delivery\/attempt\.js$/.test(u) || /\/dist\/webhooks\/circuit-breaker\.js$/.test(u),
  ],
  [
    "pool, scheduling, loop",
    (u, f) =>
      /\/dist\/(workers|core)\//.test(u) || /\/dist\/next-turn\.js$/.test(u) || (/proto\//.test(u) && /pump/.test(f)),
  ],
  ["relay, other", (u) => /\/dist\//.test(u)],
  ["prototype, other", (u) => /bench\/proto\//.test(u)],
];

/** Frames that take their caller's stage: the statement wrappers and the query builder. */
const PASS = /\/dist\/db\/sqlite\/(open|prepared)\.js$|node_modules\/(drizzle-orm|better-sqlite3)\//;

function runtimeRow(frame) {
  const { functionName: f, url: u } = frame;
  if (f === "(garbage collector)") return "(GC on the main thread)";
  if (f === "(program)") return "(program: V8 and libuv outside JS)";
  if (f === "(idle)") return null;
  if (u.startsWith("node:")) return `node ${/^node:(?:internal\/)?([\w]+)/.exec(u)?.[1] ?? u}, no stage above`;
  return "(native, no stage above)";
}

/** µs a webhook by stage from one .cpuprofile, samples within [from, to] µs of V8's clock. */
function stages(file, from, to, webhooks) {
  const p = JSON.parse(readFileSync(file, "utf8"));
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const stageOf = new Map();
  const classify = (id) => {
    let s = stageOf.get(id);
    if (s !== undefined) return s;
    s = undefined;
    for (let cur = id; cur !== undefined && s === undefined; cur = parent.get(cur)) {
      const { functionName, url, lineNumber } = byId.get(cur).callFrame;
      if (!url || PASS.test(url)) continue;
      for (const [name, test] of RULES)
        if (test(url, functionName, lineNumber + 1)) {
          s = name;
          break;
        }
    }
    s ??= runtimeRow(byId.get(id).callFrame);
    stageOf.set(id, s);
    return s;
  };
  const out = new Map();
  const detail = new Map();
  let t = p.startTime;
  for (let i = 0; i < p.samples.length; i++) {
    t += p.timeDeltas[i] ?? 0;
    const dt = p.timeDeltas[i + 1] ?? 0;
    if (t < from || t > to) continue;
    const s = classify(p.samples[i]);
    if (!s) continue;
    out.set(s, (out.get(s) ?? 0) + dt);
    if (DETAIL) {
      const { functionName, url, lineNumber } = byId.get(p.samples[i]).callFrame;
      const key = `${s} | ${functionName || "(anonymous)"} ${url.replace(/^.*\/(dist|node_modules|bench)\//, "")}:${lineNumber + 1}`;
      detail.set(key, (detail.get(key) ?? 0) + dt);
    }
  }
  for (const [k, v] of out) out.set(k, v / webhooks);
  if (DETAIL)
    for (const [k, v] of [...detail].sort((a, b) => b[1] - a[1]).slice(0, DETAIL))
      console.log(`  ${(v / webhooks).toFixed(1).padStart(7)}  ${k}`);
  return out;
}

const nowUs = () => Number(process.hrtime.bigint() / 1000n);
const sim = await proc.startSimulator(proc.HELD_SIMULATOR_ENV, join(tmp, "sim.log"), { dist });
const { hook, seen, reset, close } = await proc.countingReceiver();

async function side(kind) {
  const db = join(tmp, `${kind}.db`);
  const { id } = await proc.createClient(db, "stages", dist);
  seedPendingEvents(db, id, EVENTS, hook);
  reset();
  const dir = join(tmp, `prof-${kind}`);
  mkdirSync(dir);
  const execArgv = ["--cpu-prof", `--cpu-prof-dir=${dir}`, "--cpu-prof-interval=200"];
  const child =
    kind === "proto"
      ? proc.startNode("proto", join(proc.BENCH, "proto", "delivery.mjs"), {
          env: { DATABASE_PATH: db },
          logFile: join(tmp, "proto.log"),
          execArgv,
        })
      : await proc.startRelay(
          {
            DATABASE_PATH: db,
            UPSTREAM_BASE_URL: sim.url,
            UPSTREAM_API_KEY: "sandbox",
            WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
          },
          join(tmp, "relay.log"),
          { dist, execArgv },
        );
  if (kind === "proto") await child.waitFor(/proto-delivery ready/);
  const deadline = Date.now() + 180_000;
  let from = null;
  let warmHits = 0;
  while (seen.hits < EVENTS && Date.now() < deadline) {
    if (from === null && seen.hits >= WARM) {
      from = nowUs();
      warmHits = seen.hits;
    }
    await proc.sleep(5);
  }
  const to = nowUs();
  const counted = seen.hits - warmHits;
  await child.stop();
  const file = readdirSync(dir).find((f) => f.endsWith(".cpuprofile"));
  if (!file || from === null || counted <= 0) throw new Error(`${kind}: no profile or too few webhooks (${seen.hits})`);
  return stages(join(dir, file), from, to, counted);
}

try {
  await prepareSeeding();
  const load0 = loadAverage();
  const relay = await side("relay");
  const proto = await side("proto");
  const names = [...new Set([...relay.keys(), ...proto.keys()])].sort(
    (a, b) => (relay.get(b) ?? 0) - (proto.get(b) ?? 0) - ((relay.get(a) ?? 0) - (proto.get(a) ?? 0)),
  );
  const f = (x) => (x ?? 0).toFixed(1).padStart(8);
  console.log(`main-thread µs a webhook by stage, webhooks ${WARM}..${EVENTS} (load ${load0} → ${loadAverage()})`);
  console.log(`${"stage".padEnd(48)}   relay    proto   excess`);
  let [sr, sp] = [0, 0];
  for (const n of names) {
    const [r, p] = [relay.get(n) ?? 0, proto.get(n) ?? 0];
    sr += r;
    sp += p;
    console.log(`${n.padEnd(48)}${f(r)}${f(p)}${f(r - p)}`);
  }
  console.log(`${"total (busy)".padEnd(48)}${f(sr)}${f(sp)}${f(sr - sp)}`);
} finally {
  await close();
  await sim.stop();
  rmSync(tmp, { recursive: true, force: true });
}
