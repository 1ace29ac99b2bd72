import { describe, expect, it } from "vitest";
import { conformance, fresh, NOW, type Probe } from "../helpers/conformance.js";

/** AccountStore conformance (checklist: store-conformance.md): upstream accounts, the read budget, duration samples, on both drivers. */
const suite = conformance();
const MINUTE = 60_000;

describe.each(suite.dialects)("AccountStore on %s", (_name, h) => {
  it("updateState creates the account's row, later patches keep what they leave out; state reads it", async () => {
    const store = await h.shared();
    const account = fresh("acct");
    expect(await store.accounts.state(account)).toBeUndefined();
    await store.accounts.updateState(account, { learnedMaxConcurrent: 4, learnedAt: NOW }, NOW);
    await store.accounts.updateState(account, { readsPausedUntil: NOW + 5_000 }, NOW + 1);
    expect(await store.accounts.state(account)).toEqual({
      id: account,
      learnedMaxConcurrent: 4,
      learnedAt: NOW,
      readsPausedUntil: NOW + 5_000,
      submitPausedUntil: null,
      updatedAt: NOW + 1,
    });
    await store.accounts.updateState(account, { readsPausedUntil: null }, NOW + 2);
    expect(await store.accounts.state(account)).toMatchObject({
      learnedMaxConcurrent: 4,
      readsPausedUntil: null,
      updatedAt: NOW + 2,
    });
  });

  it("takeRead spends the window's budget, and the window slides; readsSince and pruneReads see one account", async () => {
    const store = await h.shared();
    const account = fresh("acct");
    const other = fresh("acct");
    const taken = [];
    for (let i = 0; i < 4; i++) taken.push(await store.accounts.takeRead(account, NOW + i * 1_000, 3, MINUTE));
    expect(taken).toEqual([true, true, true, false]);
    // A read is in the window while it is younger than windowMs: the first leaves it at NOW + MINUTE.
    expect(await store.accounts.takeRead(account, NOW + MINUTE - 1, 3, MINUTE)).toBe(false);
    expect(await store.accounts.takeRead(account, NOW + MINUTE, 3, MINUTE)).toBe(true);
    expect(await store.accounts.takeRead(other, NOW, 3, MINUTE)).toBe(true);
    expect(await store.accounts.readsSince(account, NOW)).toEqual([NOW + 1_000, NOW + 2_000, NOW + MINUTE]);
    expect(await store.accounts.readsSince(account, NOW - 1)).toEqual([NOW, NOW + 1_000, NOW + 2_000, NOW + MINUTE]);
    await store.accounts.pruneReads(account, NOW + 2_000);
    expect(await store.accounts.readsSince(account, 0)).toEqual([NOW + 2_000, NOW + MINUTE]);
    expect(await store.accounts.readsSince(other, 0)).toEqual([NOW]);
  });

  it("takeRead: 30 takers in 3 processes at once get exactly the 10 reads the window allows", async () => {
    const { store, another } = await h.fresh();
    const others = [store, await another(), await another()];
    const taken = await Promise.all(
      Array.from({ length: 30 }, (_, i) => others[i % 3]!.accounts.takeRead("acct", NOW + i, 10, MINUTE)),
    );
    expect(taken.filter(Boolean)).toHaveLength(10);
    expect(await store.accounts.readsSince("acct", 0)).toHaveLength(10);
  });

  it("updateState: 12 processes creating one account's row at once all succeed into one row", async () => {
    const { store, another } = await h.fresh();
    const others = [store, await another(), await another()];
    await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        others[i % 3]!.accounts.updateState("acct", { learnedMaxConcurrent: i + 1 }, NOW + i),
      ),
    );
    const state = (await store.accounts.state("acct"))!;
    expect(state.learnedMaxConcurrent! - 1).toBe(state.updatedAt - NOW);
  });

  it("durationSamples are kept per type and model; saving replaces them; none is []", async () => {
    const store = await h.shared();
    const model = fresh("model");
    expect(await store.accounts.durationSamples("image", model)).toEqual([]);
    await store.accounts.saveDurationSamples("image", model, [1_200, 900], NOW);
    await store.accounts.saveDurationSamples("video", model, [60_000], NOW);
    await store.accounts.saveDurationSamples("image", model, [1_000, 1_100, 950], NOW + 1);
    expect(await store.accounts.durationSamples("image", model)).toEqual([1_000, 1_100, 950]);
    expect(await store.accounts.durationSamples("video", model)).toEqual([60_000]);
  });

  it("saveDurationSamples: concurrent savers of one model never fail; one of their lists stands", async () => {
    const { store, another } = await h.fresh();
    const others = [store, await another()];
    await Promise.all(
      Array.from({ length: 10 }, (_, i) => others[i % 2]!.accounts.saveDurationSamples("image", "m", [i], NOW + i)),
    );
    const [kept] = await store.accounts.durationSamples("image", "m");
    expect(kept).toBeGreaterThanOrEqual(0);
    expect(kept).toBeLessThan(10);
  });
});

describe("AccountStore with hostile values: both drivers answer alike", () => {
  const text: Array<Probe<string>> = [
    {
      op: "updateState(account)",
      roundTrip: true,
      run: async (s, v) => (
        await s.accounts.updateState(v, { learnedMaxConcurrent: 1 }, NOW), (await s.accounts.state(v))?.id
      ),
    },
    { op: "state", run: (s, v) => s.accounts.state(v) },
    {
      op: "takeRead(account)",
      run: async (s, v) => [await s.accounts.takeRead(v, NOW, 5, MINUTE), await s.accounts.readsSince(v, 0)],
    },
    { op: "readsSince", run: (s, v) => s.accounts.readsSince(v, 0) },
    { op: "pruneReads", run: (s, v) => s.accounts.pruneReads(v, NOW) },
    { op: "durationSamples", run: (s, v) => s.accounts.durationSamples("image", v) },
    {
      op: "saveDurationSamples(model)",
      run: async (s, v) => (
        await s.accounts.saveDurationSamples("image", v, [1], NOW), await s.accounts.durationSamples("image", v)
      ),
    },
  ];

  const numbers: Array<Probe<number>> = [
    {
      op: "updateState(learnedMaxConcurrent)",
      roundTrip: true,
      run: async (s, v) => {
        const a = fresh("acct");
        await s.accounts.updateState(a, { learnedMaxConcurrent: v }, NOW);
        return (await s.accounts.state(a))!.learnedMaxConcurrent;
      },
    },
    {
      op: "takeRead(at)",
      run: async (s, v) => {
        const a = fresh("acct");
        return [await s.accounts.takeRead(a, v, 5, MINUTE), await s.accounts.readsSince(a, -2)];
      },
    },
    { op: "takeRead(limit)", run: (s, v) => s.accounts.takeRead(fresh("acct"), NOW, v, MINUTE) },
    { op: "readsSince(since)", run: (s, v) => s.accounts.readsSince(fresh("acct"), v) },
    { op: "pruneReads(before)", run: (s, v) => s.accounts.pruneReads(fresh("acct"), v) },
    {
      op: "saveDurationSamples(samples)",
      roundTrip: true,
      run: async (s, v) => {
        const m = fresh("model");
        await s.accounts.saveDurationSamples("image", m, [v], NOW);
        return (await s.accounts.durationSamples("image", m))[0];
      },
    },
  ];
  suite.hostile(text, numbers);
});
