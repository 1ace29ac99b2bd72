import { describe, expect, it } from "vitest";
import { ID_PATTERN, newId, pooledRandomBytes } from "../../src/ids.js";
import { newRequestId } from "../../src/http/middleware.js";
import { randomSpanId } from "../../src/telemetry/trace-context.js";

describe("newId", () => {
  it("is prefixed and matches the id pattern", () => {
    const id = newId("task", Date.UTC(2026, 0, 1));
    expect(id).toMatch(/^task_/);
    expect(id).toMatch(ID_PATTERN);
  });

  it("sorts in creation order, also within one millisecond", () => {
    const ids = [
      ...Array.from({ length: 500 }, () => newId("evt", 5_000)),
      ...Array.from({ length: 500 }, () => newId("evt", 5_001)),
    ];
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("orders by time first", () => {
    expect(newId("task", 2_000) < newId("task", 1_000_000)).toBe(true);
    expect(newId("task", 1_000_000) < newId("task", 2_000)).toBe(false);
  });
});

describe("pooledRandomBytes and the span ids drawn from it", () => {
  it("hands out fresh bytes across the pool's refills: 3,000 span ids (several 4 KiB pools), all valid and distinct", () => {
    const ids = Array.from({ length: 3_000 }, () => randomSpanId());
    expect(ids.filter((id) => !/^[0-9a-f]{16}$/.test(id) || id === "0000000000000000")).toEqual([]);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("hands request ids fresh bytes too: 3,000 (several pools), all of the answer header's form and distinct", () => {
    const ids = Array.from({ length: 3_000 }, () => newRequestId());
    expect(ids.filter((id) => !/^req_[\w-]{16}$/.test(id))).toEqual([]);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("gives the length asked, also when the pool's rest is shorter", () => {
    const lengths = [4093, 8, 16, 4096, 1].map((n) => pooledRandomBytes(n).length);
    expect(lengths).toEqual([4093, 8, 16, 4096, 1]);
  });
});
