import { expect, it } from "vitest";

it("fails on purpose (test/e2e/gate.test.ts)", () => {
  expect(1).toBe(2);
});
