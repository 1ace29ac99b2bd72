import { afterEach, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { silentLogger } from "../../src/logger.js";
import { newClient } from "../../src/services/clients.js";
import { KeyHealth, writeNotice } from "../../src/core/key-health.js";
import type { Store } from "../../src/store/store.js";
import type { SendRequest, SendResult, WebhookSender } from "../../src/webhooks/sender.js";
import { Notifier } from "../../src/workers/notifier.js";
import { LeaseOwner } from "../../src/workers/owner.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { storeDialects } from "../helpers/store-dialects.js";

/**
 * The notifier's FairPool (docs/decisions/0008-fair-pool.md) in fake time: a sender whose sends the
 * test ends by hand stands for a notification_url that hangs, so what each tick claims, and when it
 * asks to run again, is exact.
 */
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

/** A sender whose requests hang until the test answers them. */
function handSender() {
  const held: Array<{ req: SendRequest; answer: (r: SendResult) => void }> = [];
  const sender = {
    send: (req: SendRequest) => new Promise<SendResult>((answer) => held.push({ req, answer })),
  } as unknown as WebhookSender;
  const ok: SendResult = {
    ok: true,
    statusCode: 200,
    latencyMs: 1,
    error: null,
    blocked: false,
    responseBody: "",
    retryAfterMs: null,
    gone: false,
  };
  return { sender, held, ok };
}

async function client(store: Store, name: string, url: string) {
  const c = await store.clients.insert(newClient(Date.now(), { name }).row);
  await store.clients.update(c.id, { notificationUrl: url });
  return (await store.clients.find(c.id))!;
}

describe.each(storeDialects((fn) => cleanups.push(fn)))("the notifier's pool on %s", (_name, make) => {
  it("a client's backlog takes its share; another client's notice takes the reserve at the next tick; due notices of a client at its share are not spun on", async () => {
    const { store } = await make();
    const clock = new FakeClock();
    const config = loadConfig({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true", WEBHOOK_FAILING_NOTICE_AFTER: "1h" });
    const deps = { store, clock, logger: silentLogger };
    const { sender, held, ok } = handSender();
    const notifier = new Notifier({
      store,
      clock,
      config,
      logger: silentLogger,
      sender,
      owner: new LeaseOwner(),
      health: new KeyHealth(deps),
    });
    const hostile = await client(store, "hostile", "https://ops.hostile.example/n");
    const victim = await client(store, "victim", "https://ops.victim.example/n");
    for (let i = 0; i < 20; i++)
      await writeNotice(deps, hostile, "endpoint.failing", `h${i}.example:443`, { host: `h${i}.example:443` });

    const first = await notifier.tick();
    // A pool of 8 keeps 1 back: the hostile client, alone, holds 7.
    expect(notifier.slots.inFlightOf(hostile.id)).toBe(7);
    await expect.poll(() => held.length).toBe(7);
    expect(new Set(held.map((h) => h.req.tenant))).toEqual(new Set([hostile.id]));
    expect(first.didWork).toBe(true);
    // Its 13 other notices are due, but it is at its share: the loop waits for a settle, or a second.
    const idle = await notifier.tick();
    expect(notifier.slots.inUse).toBe(7);
    expect(idle).toEqual({ didWork: false, nextDueAt: clock.now() + 1_000 });

    clock.advance(10);
    await writeNotice(deps, victim, "endpoint.failing", "v.example:443", { host: "v.example:443" });
    await notifier.tick();
    // Before #30: 8 slots claimed oldest first; the victim's notice waited behind all 20.
    expect(notifier.slots.inFlightOf(victim.id)).toBe(1);
    await expect.poll(() => held.length).toBe(8);
    expect(held[7]!.req.tenant).toBe(victim.id);
    expect(notifier.slots.free).toBe(0);

    // A hostile notice settles: over its share (7 of shares of 3), it does not take the slot back.
    held[0]!.answer(ok);
    await expect.poll(() => notifier.slots.inFlightOf(hostile.id)).toBe(6);
    expect(await notifier.tick()).toEqual({ didWork: false, nextDueAt: clock.now() + 1_000 });
    expect(notifier.slots.inFlightOf(hostile.id)).toBe(6);
    for (const h of held.slice(1)) h.answer(ok);
    await notifier.drain();
  });
});
