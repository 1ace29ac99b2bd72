/**
 * Routes outside the documented API: `/_sim/*` lets tests and the e2e suite
 * inspect and steer the simulator over HTTP (no auth: it is a sandbox), and
 * `/files/*` serves placeholder bytes behind the output URLs so a demo that
 * downloads a result gets a 200.
 */
import type { Hono } from "hono";
import { z } from "zod";
import type { SimEnv } from "./hono-env.js";
import { invalidRequest, SimError } from "./errors.js";
import { readJsonObject } from "./http-util.js";
import type { SimulatorState } from "./state.js";
import { statusAt } from "./task.js";

const credits = z.number().int().min(0);
const ms = z.number().int().min(0).max(86_400_000);

const BalanceBody = z.object({ api_key: z.string().min(1), balance: credits });
const TimingsBody = z.strictObject({
  imageQueuedMs: ms.optional(),
  imageProcessingMs: ms.optional(),
  videoQueuedMs: ms.optional(),
  videoProcessingMs: ms.optional(),
});
const AccountBody = z.object({
  api_key: z.string().min(1),
  balance: credits.optional(),
  max_concurrent: z.number().int().min(1).optional(),
  reads_per_minute: z.number().int().min(0).optional(),
});

// 1x1 transparent PNG, and an MP4 holding only its `ftyp` box: enough for a content sniffer.
const PNG = Buffer.from(
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
  "base64",
);
const MP4 = Buffer.from("000000186674797069736f6d0000020069736f6d6d703431", "hex");
const FILE_NAME = /^(up_[0-9a-z]+)(-0\.png|\.mp4)$/u;

function parse<T>(schema: z.ZodType<T>, body: unknown): T {
  const result = schema.safeParse(body);
  if (result.success) return result.data;
  const details = result.error.issues.map((i) => ({ field: i.path.join(".") || "body", message: i.message }));
  throw invalidRequest("Invalid admin request body", details);
}

function accountParam(state: SimulatorState, apiKey: string | undefined): string {
  if (!apiKey)
    throw invalidRequest("api_key query parameter is required", [{ field: "api_key", message: "is required" }]);
  if (!state.findAccount(apiKey)) throw new SimError(404, "not_found", "No such simulator account");
  return apiKey;
}

export function mountAdminRoutes(app: Hono<SimEnv>, state: SimulatorState): void {
  app.get("/_sim/stats", (c) => c.json({ ...state.stats(), creations_per_key_max: state.maxCreationsPerKey() }));

  // One account's accepted task reads (counts, busiest 60 s window, their times) and its tasks'
  // created/processing/completed instants: what a benchmark needs to measure completion→webhook
  // latency and the read budget from the upstream's side.
  app.get("/_sim/reads", (c) => c.json({ data: state.readsOf(accountParam(state, c.req.query("api_key"))) }));
  app.get("/_sim/tasks", (c) => c.json({ data: state.taskTimelines(accountParam(state, c.req.query("api_key"))) }));

  app.post("/_sim/balance", async (c) => {
    const body = parse(BalanceBody, await readJsonObject(c));
    if (!state.findAccount(body.api_key)) throw new SimError(404, "not_found", "No such simulator account");
    state.setBalance(body.api_key, body.balance);
    return c.json({ data: { balance: state.balance(body.api_key) } });
  });

  app.post("/_sim/timings", async (c) => {
    const body = parse(TimingsBody, await readJsonObject(c));
    state.setTimings(Object.fromEntries(Object.entries(body).filter(([, v]) => v !== undefined)));
    return c.json({ data: state.timings });
  });

  app.post("/_sim/accounts", async (c) => {
    const body = parse(AccountBody, await readJsonObject(c));
    if (state.findAccount(body.api_key)) throw invalidRequest("Simulator account already exists");
    state.addAccount({
      apiKey: body.api_key,
      ...(body.balance !== undefined ? { balance: body.balance } : {}),
      ...(body.max_concurrent !== undefined ? { maxConcurrent: body.max_concurrent } : {}),
      ...(body.reads_per_minute !== undefined ? { readsPerMinute: body.reads_per_minute } : {}),
    });
    return c.json({ data: { balance: state.balance(body.api_key) } }, 201);
  });

  app.get("/files/:name", (c) => {
    const match = FILE_NAME.exec(c.req.param("name"));
    const task = match ? state.taskById(match[1]!) : undefined;
    const isVideo = match?.[2] === ".mp4";
    if (!task || statusAt(task, state.clock.now()) !== "succeeded" || (task.type === "video") !== isVideo) {
      throw new SimError(404, "not_found", "No such file");
    }
    return c.body(new Uint8Array(isVideo ? MP4 : PNG), 200, { "Content-Type": isVideo ? "video/mp4" : "image/png" });
  });
}
