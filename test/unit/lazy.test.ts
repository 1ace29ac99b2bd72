import { describe, expect, it } from "vitest";
import { lazy } from "../../src/lazy.js";

/** A load the test finishes by hand, counting its calls. */
function controlled<T>() {
  const calls: Array<{ resolve: (v: T) => void; reject: (e: Error) => void }> = [];
  const load = () =>
    new Promise<T>((resolve, reject) => {
      calls.push({ resolve, reject });
    });
  return { load, calls };
}

describe("lazy", () => {
  it("loads once on first use, however many callers ask at once, and keeps the value", async () => {
    const { load, calls } = controlled<string>();
    const value = lazy(load);
    expect(value.peek()).toBeUndefined();
    const both = Promise.all([value.get(), value.get()]);
    expect(calls).toHaveLength(1);
    calls[0]!.resolve("client");
    expect(await both).toEqual(["client", "client"]);
    expect(value.peek()).toBe("client");
    expect(await value.get()).toBe("client");
    expect(calls).toHaveLength(1);
  });

  it("keeps no failed load: the next use tries again", async () => {
    const { load, calls } = controlled<string>();
    const value = lazy(load);
    const first = value.get();
    calls[0]!.reject(new Error("module not found"));
    await expect(first).rejects.toThrow("module not found");
    const second = value.get();
    expect(calls).toHaveLength(2);
    calls[1]!.resolve("client");
    expect(await second).toBe("client");
  });

  it("loaded() starts no load, and reaches a value whose load was under way (a close must not miss it)", async () => {
    const { load, calls } = controlled<string>();
    const value = lazy(load);
    expect(await value.loaded()).toBeUndefined();
    expect(calls).toHaveLength(0);
    const using = value.get();
    const closing = value.loaded();
    expect(value.peek()).toBeUndefined();
    calls[0]!.resolve("client");
    expect(await closing).toBe("client");
    await using;
  });

  it("loaded() answers undefined for a load that failed, without throwing", async () => {
    const { load, calls } = controlled<string>();
    const value = lazy(load);
    const using = value.get().catch((err: Error) => err.message);
    const closing = value.loaded();
    calls[0]!.reject(new Error("no such package"));
    expect(await closing).toBeUndefined();
    expect(await using).toBe("no such package");
  });
});
