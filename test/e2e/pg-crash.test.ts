import { describe, expect, it } from "vitest";
import { BUILT, createImage, processesPerTest, simulatorStats, succeededTasks, until } from "./process.js";

/**
 * Three built relays as processes on one PostgreSQL database, against the simulator as its own
 * process (`pgSetup`: 120 reads a minute per account, 429 past it). The instance
 * leading the upstream account is killed with SIGKILL mid-work: the others take over.
 */
const run = processesPerTest();

describe.skipIf(!BUILT)("several relay processes on PostgreSQL", () => {
  it("the leader of the upstream account is killed (SIGKILL) mid-work: every webhook arrives, one creation per task, the read limit is never hit", async () => {
    const { simUrl, relayEnv, apiKey, secret } = await run.pgSetup("pg");
    const env = relayEnv(simUrl);
    const relays = [await run.startRelay(env), await run.startRelay(env), await run.startRelay(env)];
    const receiver = await run.startReceiver();

    const ids = new Set<string>();
    for (let i = 0; i < 30; i++) {
      const key = `pg-e2e-${i}`;
      ids.add(
        await createImage(relays[i % 3]!.url, apiKey, {
          idempotencyKey: key,
          prompt: `pg e2e ${i}`,
          callbackUrl: receiver.url,
        }),
      );
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

    const terminal = () => succeededTasks(receiver.hooks, secret);
    await until(
      () => [...ids].every((id) => terminal().has(id)),
      receiver.onHook,
      90_000,
      () => `${terminal().size}/${ids.size} tasks with webhooks`,
    );
    // Another instance announced it took the account over.
    expect(relays.filter((r) => r !== leader).some((r) => r.child.lines.some((l) => leading.test(l)))).toBe(true);

    const stats = await simulatorStats(simUrl);
    expect(stats.tasks_created).toBe(ids.size);
    expect(stats.creations_per_key_max).toBe(1);
    expect(stats.rate_limited).toBe(0);
  }, 150_000);
});
