import { describe, expect, it } from "vitest";
import { conformance, fresh, NOW, type Probe } from "../helpers/conformance.js";

/**
 * RateLimitStore conformance (checklist: store-conformance.md): per-client sliding windows counted
 * in the database, so every process sharing it allows what one would (docs/contract.md, "Limits hold across instances").
 */
const suite = conformance();
const MINUTE = 60_000;

describe.each(suite.dialects)("RateLimitStore on %s", (_name, h) => {
  it("take counts up to the limit in the window, refuses past it until the oldest leaves, per client and action", async () => {
    const store = await h.shared();
    const client = fresh("cli");
    const verdicts = [];
    for (let i = 0; i < 4; i++) verdicts.push(await store.limits.take(client, "redeliver", NOW + i * 1_000, 3, MINUTE));
    // The fourth waits for the first to leave the window: NOW + MINUTE.
    expect(verdicts).toEqual([
      { allowed: true },
      { allowed: true },
      { allowed: true },
      { allowed: false, retryAt: NOW + MINUTE },
    ]);
    // A refusal is not counted: the window still holds three, the first leaving at NOW + MINUTE.
    expect(await store.limits.take(client, "redeliver", NOW + MINUTE - 1, 3, MINUTE)).toEqual({
      allowed: false,
      retryAt: NOW + MINUTE,
    });
    expect(await store.limits.take(client, "redeliver", NOW + MINUTE, 3, MINUTE)).toEqual({ allowed: true });
    expect(await store.limits.take(client, "redeliver", NOW + MINUTE, 3, MINUTE)).toEqual({
      allowed: false,
      retryAt: NOW + 1_000 + MINUTE,
    });
    // Another action of the client, and the same action of another client, have windows of their own.
    expect(await store.limits.take(client, "recover", NOW + MINUTE, 3, MINUTE)).toEqual({ allowed: true });
    expect(await store.limits.take(fresh("cli"), "redeliver", NOW + MINUTE, 3, MINUTE)).toEqual({ allowed: true });
  });

  it("give hands back one count at its time (a place held until now); nothing to give is a no-op", async () => {
    const store = await h.shared();
    const client = fresh("cli");
    // Two places taken in the same millisecond, one later: the limit of 3 is reached.
    for (const at of [NOW, NOW, NOW + 5])
      expect(await store.limits.take(client, "held", at, 3, MINUTE)).toEqual({ allowed: true });
    expect((await store.limits.take(client, "held", NOW + 6, 3, MINUTE)).allowed).toBe(false);
    await store.limits.give(client, "held", NOW);
    expect(await store.limits.take(client, "held", NOW + 7, 3, MINUTE)).toEqual({ allowed: true });
    expect((await store.limits.take(client, "held", NOW + 8, 3, MINUTE)).allowed).toBe(false);
    // Only that client's and action's count goes; one not there (or another client's) changes nothing.
    await store.limits.give(fresh("cli"), "held", NOW + 5);
    await store.limits.give(client, "other", NOW + 5);
    await store.limits.give(client, "held", NOW + 999);
    expect((await store.limits.take(client, "held", NOW + 9, 3, MINUTE)).allowed).toBe(false);
    await store.limits.give(client, "held", NOW + 5);
    expect(await store.limits.take(client, "held", NOW + 10, 3, MINUTE)).toEqual({ allowed: true });
    // Gives at once, of places of the same millisecond: each gives back its own.
    const burst = fresh("cli");
    for (let i = 0; i < 8; i++) await store.limits.take(burst, "held", NOW, 8, MINUTE);
    await Promise.all(Array.from({ length: 8 }, () => store.limits.give(burst, "held", NOW)));
    for (let i = 0; i < 8; i++)
      expect(await store.limits.take(burst, "held", NOW + 1, 8, MINUTE)).toEqual({ allowed: true });
  });

  it("renew moves a count to now (a place still held keeps counting); one already gone is counted anew", async () => {
    const store = await h.shared();
    const client = fresh("cli");
    expect(await store.limits.take(client, "open", NOW, 1, MINUTE)).toEqual({ allowed: true });
    await store.limits.renew(client, "open", NOW, NOW + 50_000);
    // Past the first count's window, the renewed one still counts until NOW + 50 s + MINUTE.
    expect(await store.limits.take(client, "open", NOW + MINUTE + 1, 1, MINUTE)).toEqual({
      allowed: false,
      retryAt: NOW + 50_000 + MINUTE,
    });
    await store.limits.give(client, "open", NOW + 50_000);
    expect(await store.limits.take(client, "open", NOW + MINUTE + 2, 1, MINUTE)).toEqual({ allowed: true });
    // Nothing left at the renewed time (the window dropped it): counted anew at now.
    const other = fresh("cli");
    await store.limits.renew(other, "open", NOW, NOW + 5);
    expect(await store.limits.take(other, "open", NOW + 6, 1, MINUTE)).toEqual({
      allowed: false,
      retryAt: NOW + 5 + MINUTE,
    });
  });

  it("take with a lower limit than what the window holds waits until enough have left", async () => {
    const store = await h.shared();
    const client = fresh("cli");
    for (let i = 0; i < 5; i++) await store.limits.take(client, "ping", NOW + i, 10, MINUTE);
    // Five counted at NOW..NOW+4; a limit of 2 lets one more in once four have left (NOW + 3 leaves last of them).
    expect(await store.limits.take(client, "ping", NOW + 10, 2, MINUTE)).toEqual({
      allowed: false,
      retryAt: NOW + 3 + MINUTE,
    });
    expect(await store.limits.take(client, "ping", NOW + 10, 0, MINUTE)).toEqual({
      allowed: false,
      retryAt: NOW + 4 + MINUTE,
    });
  });

  it("take: 30 takers in 3 processes at once get exactly the limit, and so does the next window", async () => {
    const { store, another } = await h.fresh();
    const others = [store, await another(), await another()];
    const round = (at: number) =>
      Promise.all(
        Array.from({ length: 30 }, (_, i) => others[i % 3]!.limits.take("cli_x", "retry", at + (i % 5), 10, MINUTE)),
      );
    expect((await round(NOW)).filter((v) => v.allowed)).toHaveLength(10);
    expect((await round(NOW + 5)).filter((v) => v.allowed)).toHaveLength(0);
    expect((await round(NOW + 5 + MINUTE)).filter((v) => v.allowed)).toHaveLength(10);
  });
});

describe("RateLimitStore with hostile values: both drivers answer alike", () => {
  const text: Array<Probe<string>> = [
    { op: "take(clientId)", run: (s, v) => s.limits.take(v, "ping", NOW, 10, MINUTE) },
    { op: "take(action)", run: (s, v) => s.limits.take(fresh("cli"), v, NOW, 10, MINUTE) },
  ];

  const numbers: Array<Probe<number>> = [
    { op: "take(now)", run: (s, v) => s.limits.take(fresh("cli"), "ping", v, 10, MINUTE) },
    { op: "take(limit)", run: (s, v) => s.limits.take(fresh("cli"), "ping", NOW, v, MINUTE) },
    { op: "take(windowMs)", run: (s, v) => s.limits.take(fresh("cli"), "ping", NOW, 10, v) },
  ];
  suite.hostile(text, numbers);
});
