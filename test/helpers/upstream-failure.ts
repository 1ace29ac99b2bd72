import { expect } from "vitest";
import { UpstreamError } from "../../src/upstream/errors.js";

/** The UpstreamError a call to the upstream client fails with (the test fails if it resolves). */
export async function upstreamFailure(p: Promise<unknown>): Promise<UpstreamError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(UpstreamError);
    return err as UpstreamError;
  }
  throw new Error("expected the call to fail");
}
