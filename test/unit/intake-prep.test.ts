import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { priceKey } from "../../src/core/pricing.js";
import { canonicalJson } from "../../src/crypto.js";
import { newId } from "../../src/ids.js";

/** canonicalJson as it was written before it built its string in place (the reference). */
function reference(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(reference).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.keys(value as Record<string, unknown>)
      .sort()
      .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${reference((value as Record<string, unknown>)[k])}`);
    return `{${entries.join(",")}}`;
  }
  return JSON.stringify(value);
}

const sha = (text: string) => createHash("sha256").update(text, "utf8").digest("hex");

describe("a creation's preparation (issue #43: the same text and keys, built for less)", () => {
  it("canonicalJson writes what the reference writes, undefined and nesting included", () => {
    const values: unknown[] = [
      null,
      3,
      'a\u2028b"c',
      [],
      {},
      [1, undefined, null, "x", [undefined]],
      { b: 1, a: undefined, é: [{ z: null, y: { x: [] } }], "\u0000k": "v" },
      { model: "p-image", prompt: "p", image_urls: ["https://e.test/a.png"], count: 1, seed: undefined },
      { only: undefined },
    ];
    for (const value of values) expect(canonicalJson(value)).toBe(reference(value));
  });

  it("a price key is the SHA-256 of its canonical text, first time, kept, past the kept count and for long texts", () => {
    const expected = (body: Record<string, unknown>) => {
      const relevant = { ...body };
      delete relevant.prompt;
      return `image:${String(body.model)}:${sha(reference(relevant)).slice(0, 32)}`;
    };
    const bodies = [
      ...Array.from({ length: 600 }, (_, i) => ({ model: "p-image", prompt: "x", size: `${i}x${i}` })),
      { model: "p-image", prompt: "y", size: "1x1" },
      { model: "p-image", extra: "z".repeat(2_000) },
    ];
    for (const round of [1, 2])
      for (const body of bodies) expect(priceKey("image", body), `round ${round}`).toBe(expected(body));
  });

  it("an id's time digits follow the clock across milliseconds (kept per millisecond, never stale)", () => {
    const digits = (ms: number) => {
      let text = "";
      let t = ms;
      for (let i = 0; i < 10; i++) {
        text = "0123456789abcdefghjkmnpqrstvwxyz"[t % 32] + text;
        t = Math.floor(t / 32);
      }
      return text;
    };
    for (const ms of [1_800_000_000_000, 1_800_000_000_000, 1_800_000_000_001, 5, 1_800_000_000_001]) {
      expect(newId("task", ms).slice(5, 15)).toBe(digits(ms));
    }
  });
});
