import { describe, expect, it } from "vitest";
import { eventsInDueOrder, inPickedOrder, noticesInDueOrder } from "../../src/db/kit/claim-order.js";
import { wakeAt } from "../../src/db/kit/due-time.js";
import { clientRoom } from "../../src/db/kit/task-claims.js";

describe("db/kit: the claim orders and the due time both drivers share", () => {
  it("inPickedOrder hands claimed rows back in the order they were picked", () => {
    const claimed = [{ id: "c" }, { id: "a" }, { id: "b" }];
    expect(inPickedOrder(claimed, ["b", "c", "a"]).map((r) => r.id)).toEqual(["b", "c", "a"]);
    expect(inPickedOrder([], ["a"])).toEqual([]);
  });

  it("events go out by due time, then seq; notices by due time, then id; no due time counts as 0", () => {
    const events = [
      { nextAttemptAt: 20, seq: 1 },
      { nextAttemptAt: 10, seq: 3 },
      { nextAttemptAt: 10, seq: 2 },
      { nextAttemptAt: null, seq: 9 },
    ];
    expect(eventsInDueOrder(events).map((e) => e.seq)).toEqual([9, 2, 3, 1]);
    const notices = [
      { nextAttemptAt: 5, id: "b" },
      { nextAttemptAt: 5, id: "a" },
      { nextAttemptAt: 1, id: "z" },
    ];
    expect(noticesInDueOrder(notices).map((n) => n.id)).toEqual(["z", "a", "b"]);
  });

  it("wakeAt: the first due time or just after the first lease ends, whichever is first; null with neither", () => {
    expect(wakeAt(null, null)).toBeNull();
    expect(wakeAt(100, null)).toBe(100);
    expect(wakeAt(null, 50)).toBe(51);
    expect(wakeAt(100, 50)).toBe(51);
    expect(wakeAt(40, 50)).toBe(40);
    expect(wakeAt(51, 50)).toBe(51);
  });

  it("clientRoom: the claim's limit, bounded by the running cap less what runs; none or less at the cap", () => {
    expect(clientRoom(null, 7, 5)).toBe(5);
    expect(clientRoom(10, 7, 5)).toBe(3);
    expect(clientRoom(10, 2, 5)).toBe(5);
    expect(clientRoom(2, 2, 5)).toBe(0);
    expect(clientRoom(2, 3, 5)).toBe(-1);
  });
});
