import { expect, it } from "vitest";

it("passes (test/e2e/gate.test.ts)", () => {
  expect(1).toBe(1);
});
