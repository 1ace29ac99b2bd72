import { describe, expect, it } from "vitest";
import type { Store } from "../../src/store/store.js";
import type { NewSessionRow } from "../../src/store/rows.js";
import { client, conformance, fresh, NOW, type Probe } from "../helpers/conformance.js";

/** SessionStore conformance (checklist: store-conformance.md): dashboard sessions, on both drivers. */
const suite = conformance();

async function session(store: Store, extra: Partial<NewSessionRow> = {}): Promise<NewSessionRow> {
  const row = {
    tokenHash: fresh("tok"),
    clientId: (await client(store)).id,
    csrfToken: fresh("csrf"),
    createdAt: NOW,
    lastSeenAt: NOW,
    expiresAt: NOW + 60_000,
    ...extra,
  };
  await store.sessions.open(row, NOW);
  return row;
}

describe.each(suite.dialects)("SessionStore on %s", (_name, h) => {
  it("open stores the session; find reads it; touch and revoke change it; an unknown token finds nothing", async () => {
    const store = await h.shared();
    const row = await session(store);
    expect(await store.sessions.find(row.tokenHash)).toEqual({ ...row, revokedAt: null });
    await store.sessions.touch(row.tokenHash, NOW + 5);
    expect((await store.sessions.find(row.tokenHash))!.lastSeenAt).toBe(NOW + 5);
    await store.sessions.revoke(row.tokenHash, NOW + 6);
    await store.sessions.revoke(row.tokenHash, NOW + 7);
    expect(await store.sessions.find(row.tokenHash)).toMatchObject({ lastSeenAt: NOW + 5, revokedAt: NOW + 6 });
    expect(await store.sessions.find("tok-nobody")).toBeUndefined();
    await store.sessions.touch("tok-nobody", NOW);
    await store.sessions.revoke("tok-nobody", NOW);
  });

  it("open deletes the sessions that ended (expired or revoked), of every client, and keeps the live ones", async () => {
    const store = await h.shared();
    const expired = await session(store, { expiresAt: NOW + 10 });
    const revoked = await session(store, { expiresAt: NOW + 1_000 });
    await store.sessions.revoke(revoked.tokenHash, NOW);
    const live = await session(store, { expiresAt: NOW + 1_000 });
    await store.sessions.open({ ...live, tokenHash: fresh("tok") }, NOW + 11);
    expect(await store.sessions.find(expired.tokenHash)).toBeUndefined();
    expect(await store.sessions.find(revoked.tokenHash)).toBeUndefined();
    expect(await store.sessions.find(live.tokenHash)).toBeDefined();
  });

  it("revoke: 20 concurrent revocations end the session once, at one of their times", async () => {
    const { store, another } = await h.fresh();
    const row = await session(store);
    const others = [store, await another(), await another()];
    await Promise.all(
      Array.from({ length: 20 }, (_, i) => others[i % 3]!.sessions.revoke(row.tokenHash, NOW + 100 + i)),
    );
    const revokedAt = (await store.sessions.find(row.tokenHash))!.revokedAt!;
    expect(revokedAt).toBeGreaterThanOrEqual(NOW + 100);
    expect(revokedAt).toBeLessThan(NOW + 120);
    await store.sessions.touch(row.tokenHash, NOW + 500);
    expect((await store.sessions.find(row.tokenHash))!.revokedAt).toBe(revokedAt);
  });

  it("open: two sign-ins with one token at once store one session, and the other is refused", async () => {
    const { store, another } = await h.fresh();
    const c = await client(store);
    const other = await another();
    const row = (csrf: string) => ({
      tokenHash: "tok-same",
      clientId: c.id,
      csrfToken: csrf,
      createdAt: NOW,
      lastSeenAt: NOW,
      expiresAt: NOW + 60_000,
    });
    const results = await Promise.allSettled([store.sessions.open(row("a"), NOW), other.sessions.open(row("b"), NOW)]);
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
    expect(["a", "b"]).toContain((await store.sessions.find("tok-same"))!.csrfToken);
  });

  it("open is one step: when the insert is refused, the ended sessions it deleted come back", async () => {
    const store = await h.shared();
    const ended = await session(store, { expiresAt: NOW + 1 });
    const taken = await session(store);
    await expect(store.sessions.open({ ...taken, csrfToken: "again" }, NOW + 2)).rejects.toThrow();
    expect(await store.sessions.find(ended.tokenHash)).toBeDefined();
    expect((await store.sessions.find(taken.tokenHash))!.csrfToken).toBe(taken.csrfToken);
  });
});

describe("SessionStore with hostile values: both drivers answer alike", () => {
  const text: Array<Probe<string>> = [
    {
      op: "open(tokenHash)",
      roundTrip: true,
      run: async (s, v) => (await s.sessions.find((await session(s, { tokenHash: v })).tokenHash))?.tokenHash,
    },
    {
      op: "open(csrfToken)",
      roundTrip: true,
      run: async (s, v) => (await s.sessions.find((await session(s, { csrfToken: v })).tokenHash))?.csrfToken,
    },
    { op: "find", run: (s, v) => s.sessions.find(v) },
    { op: "touch", run: (s, v) => s.sessions.touch(v, NOW) },
    { op: "revoke", run: (s, v) => s.sessions.revoke(v, NOW) },
  ];

  const numbers: Array<Probe<number>> = [
    {
      op: "open(expiresAt)",
      roundTrip: true,
      run: async (s, v) => (await s.sessions.find((await session(s, { expiresAt: v })).tokenHash))?.expiresAt,
    },
    {
      op: "touch(now)",
      roundTrip: true,
      run: async (s, v) => {
        const row = await session(s);
        await s.sessions.touch(row.tokenHash, v);
        return (await s.sessions.find(row.tokenHash))!.lastSeenAt;
      },
    },
  ];
  suite.hostile(text, numbers);
});
