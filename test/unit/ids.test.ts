import { describe, expect, it } from "vitest";
import { ID_PATTERN, newId } from "../../src/ids.js";

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
