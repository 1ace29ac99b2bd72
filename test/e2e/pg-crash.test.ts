import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { Webhook } from "standardwebhooks";
import { afterEach, describe, expect, it } from "vitest";
import { freshPgDatabase } from "../helpers/pg.js";
import { DIST, startNode, startReceiver, startRelayProcess, until, type Child } from "./process.js";

/**
 * Three built relays as processes on one PostgreSQL database, against the simulator as its own
 * process (which enforces 120 reads a minute per account, answering 429 past it). The instance
 * leading the upstream account is killed with SIGKILL mid-work: the others take over.
 */
const built = existsSync(join(DIST, "main.js")) && existsSync(join(DIST, "simulator", "main.js"));
const children: Child[] = [];
const cleanups: Array<() => Promise<void>> = [];

afterEach(async () => {
  await Promise.all(children.splice(0).map((c) => c.kill("SIGKILL")));
  for (const c of cleanups.splice(0)) await c();
});

async function startRelay(env: Record<string, string>): Promise<{ child: Child; url: string }> {
  const relay = await startRelayProcess(env);
  children.push(relay.child);
  return relay;
}

describe.skipIf(!built)("several relay processes on PostgreSQL", () => {
  it("the leader of the upstream account is killed (SIGKILL) mid-work: every webhook arrives, one creation per task, the read limit is never hit", async () => {
    const db = await freshPgDatabase();
    cleanups.push(db.drop);
    const simulator = startNode("simulator/main.js", {
      SIM_PORT: "0",
      SIM_API_KEYS: "pg-upstream-key",
      SIM_READS_PER_MINUTE: "120",
      SIM_MAX_CONCURRENT: "1000",
      SIM_IMAGE_QUEUED_MS: "300",
      SIM_IMAGE_PROCESSING_MS: "1500",
    });
    children.push(simulator);
    const simUrl = (await simulator.waitForLine(/listening on (http:\/\/\S+)/))[1]!;
    const env = {
      PORT: "0",
      DATABASE_URL: db.url,
      UPSTREAM_BASE_URL: simUrl,
      UPSTREAM_API_KEY: "pg-upstream-key",
      UPSTREAM_READS_PER_MINUTE: "100",
      UPSTREAM_TIMEOUT_MS: "2000",
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
      WEBHOOK_TIMEOUT_MS: "2000",
      WEBHOOK_RETRY_SCHEDULE: "0s,1s,2s,5s,10s",
      LOG_LEVEL: "info",
    };
    const created = JSON.parse(
      execFileSync(process.execPath, [join(DIST, "cli.js"), "clients", "create", "--name", "pg-e2e", "--json"], {
        env: { PATH: process.env.PATH ?? "", DATABASE_URL: db.url },
        encoding: "utf8",
      }),
    ) as { api_key: string; webhook_secret: string };
    const relays = [await startRelay(env), await startRelay(env), await startRelay(env)];
    const receiver = await startReceiver();
    cleanups.push(() => receiver.close());

    const ids = new Set<string>();
    for (let i = 0; i < 30; i++) {
      const res = await fetch(`${relays[i % 3]!.url}/openapi/v1/images/generations`, {
        method: "POST",
        headers: {
          Authorization: `Bearer ${created.api_key}`,
          "Content-Type": "application/json",
          "Idempotency-Key": `pg-e2e-${i}`,
        },
        body: JSON.stringify({
          model: "p-image",
          mode: "generate",
          prompt: `pg e2e ${i}`,
          count: 1,
          callback_url: receiver.url,
        }),
      });
      expect(res.status).toBe(201);
      ids.add(((await res.json()) as { data: { id: string } }).data.id);
    }

    // The instance that took the account says so; it dies as soon as the first webhook is out.
    const leading = /"msg":"leading upstream account/;
    const leader = await Promise.any(relays.map((r) => r.child.waitForLine(leading, 20_000).then(() => r)));
    await until(
      () => receiver.hooks.length >= 1,
      receiver.onHook,
      30_000,
      () => "first webhook",
    );
    await leader.child.kill("SIGKILL");

    const wh = new Webhook(created.webhook_secret);
    const terminal = () => {
      const seen = new Set<string>();
      for (const hook of receiver.hooks) {
        const event = wh.verify(hook.body, {
          "webhook-id": String(hook.headers["webhook-id"]),
          "webhook-timestamp": String(hook.headers["webhook-timestamp"]),
          "webhook-signature": String(hook.headers["webhook-signature"]),
        }) as { type: string; data: { id: string } };
        if (event.type === "task.succeeded") seen.add(event.data.id);
      }
      return seen;
    };
    await until(
      () => [...ids].every((id) => terminal().has(id)),
      receiver.onHook,
      90_000,
      () => `${terminal().size}/${ids.size} tasks with webhooks`,
    );
    // Another instance announced it took the account over.
    expect(relays.filter((r) => r !== leader).some((r) => r.child.lines.some((l) => leading.test(l)))).toBe(true);

    const stats = (await (await fetch(`${simUrl}/_sim/stats`)).json()) as {
      tasks_created: number;
      creations_per_key_max: number;
      rate_limited: number;
    };
    expect(stats.tasks_created).toBe(ids.size);
    expect(stats.creations_per_key_max).toBe(1);
    expect(stats.rate_limited).toBe(0);
  }, 150_000);
});
