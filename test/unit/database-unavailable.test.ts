import { describe, expect, it } from "vitest";
import { isDatabaseUnavailable } from "../../src/store/database-health.js";

/** docs/operations.md, "PostgreSQL failover": what answers 503 storage_unavailable rather than 500. */
describe("isDatabaseUnavailable", () => {
  it("a write refused as read-only (25006: a standby or a demoted primary behind the address) is an outage", () => {
    const readOnly = Object.assign(new Error("cannot execute INSERT in a read-only transaction"), { code: "25006" });
    expect(isDatabaseUnavailable(readOnly)).toBe(true);
    expect(isDatabaseUnavailable(new Error("wrapped", { cause: readOnly }))).toBe(true);
  });

  it("a lost connection is one; a constraint or a syntax error is not", () => {
    expect(isDatabaseUnavailable(Object.assign(new Error("terminating connection"), { code: "57P01" }))).toBe(true);
    expect(isDatabaseUnavailable(new Error("Connection terminated unexpectedly"))).toBe(true);
    expect(isDatabaseUnavailable(Object.assign(new Error("duplicate key"), { code: "23505" }))).toBe(false);
    expect(isDatabaseUnavailable(Object.assign(new Error("syntax error"), { code: "42601" }))).toBe(false);
  });
});
