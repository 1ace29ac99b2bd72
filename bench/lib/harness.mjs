// What the intake rows share (bench/run.mjs, and bench/prototypes.mjs run alone): the creation body,
// autocannon load with a fresh Idempotency-Key per request, warm-up, the relay's environment and
// databases copied from one migrated template.
import autocannon from "autocannon";
import { copyFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { createClient } from "./proc.mjs";
import { round } from "./stats.mjs";

export const PATH = "/openapi/v1/images/generations";
export const PUBLIC_CALLBACK = "https://hooks.example.com/genrelay";
export const creationBody = (callbackUrl) => ({
  model: "p-image",
  mode: "generate",
  prompt: "a lighthouse at dawn, volumetric fog",
  count: 1,
  callback_url: callbackUrl,
  metadata: { order_id: "1234" },
});

/** autocannon POSTs of a creation body, each with a fresh Idempotency-Key; only 201s count as accepted. */
export async function load({ url, apiKey, keyPrefix, body, connections, duration, amount }) {
  let n = 0;
  const headers = { "content-type": "application/json" };
  if (apiKey) headers.authorization = `Bearer ${apiKey}`;
  const instance = autocannon({
    url,
    connections,
    ...(amount ? { amount } : { duration }),
    timeout: 30,
    requests: [
      {
        method: "POST",
        path: PATH,
        headers,
        body: JSON.stringify(body),
        setupRequest: (req) => ({
          ...req,
          headers: { ...req.headers, "idempotency-key": `${keyPrefix}${String(n++).padStart(8, "0")}` },
        }),
      },
    ],
  });
  // 201s per second of the run: shows whether the rate holds as the relay's backlog grows.
  const t0 = Date.now();
  const perSecond = [];
  instance.on("response", (_client, statusCode) => {
    if (statusCode !== 201) return;
    const s = Math.floor((Date.now() - t0) / 1000);
    perSecond[s] = (perSecond[s] ?? 0) + 1;
  });
  const result = await instance;
  const statusCodes = Object.fromEntries(Object.entries(result.statusCodeStats ?? {}).map(([k, v]) => [k, v.count]));
  const accepted = statusCodes["201"] ?? 0;
  return {
    accepted,
    sent: result.requests.sent,
    seconds: result.duration,
    rate: round(accepted / result.duration, 1),
    p50_ms: result.latency.p50,
    p99_ms: result.latency.p99,
    per_second: Array.from({ length: Math.floor(result.duration) }, (_, i) => perSecond[i] ?? 0),
    status_codes: statusCodes,
    errors: result.errors,
    timeouts: result.timeouts,
  };
}

/**
 * The helpers of one run: `cfg.intake` ({ connections, duration | amount, warmup }), `quick` (amounts,
 * not durations), `tmp` (where databases go), `logLevel` (the relay's LOG_LEVEL).
 */
export function harness({ cfg, quick, tmp, logLevel }) {
  /** Unmeasured load before a measurement, so the JIT has warmed up (keys under their own prefix). */
  async function warmUp(opts) {
    if (!cfg.intake.warmup) return;
    await load({ ...opts, keyPrefix: `warm-${opts.keyPrefix}`, duration: cfg.intake.warmup, amount: undefined });
  }

  const loadOpts = (extra) => ({
    connections: cfg.intake.connections,
    ...(quick ? { amount: cfg.intake.amount } : { duration: cfg.intake.duration }),
    ...extra,
  });

  function relayEnv(databasePath, upstreamUrl, extra = {}) {
    return {
      DATABASE_PATH: databasePath,
      UPSTREAM_BASE_URL: upstreamUrl,
      UPSTREAM_API_KEY: "sandbox",
      LOG_LEVEL: logLevel,
      ...extra,
    };
  }

  let template = null;
  /**
   * A database migrated by the relay's CLI, holding one client (`clients create`). The CLI runs once,
   * on a template; every database after it is a copy of that file (the CLI's start-up and migrations
   * take seconds each). Every copy has the same client, API key and webhook secret.
   */
  async function newDatabase(name) {
    template ??= (async () => {
      const path = join(tmp, "template.db");
      return { path, client: await createClient(path) };
    })();
    const t = await template;
    const path = join(tmp, `${name}.db`);
    copyFileSync(t.path, path);
    if (existsSync(`${t.path}-wal`)) copyFileSync(`${t.path}-wal`, `${path}-wal`);
    return { path, client: t.client };
  }

  return { warmUp, loadOpts, relayEnv, newDatabase, load, creationBody, PUBLIC_CALLBACK };
}
