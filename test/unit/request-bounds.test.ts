import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { knownFields, meantField, nearMissProblems, type NearMissWork } from "../../src/services/intake-fields.js";
import { fieldCountProblem } from "../../src/services/request-bounds.js";
import { REQUEST_BOUNDS, storedBytesOf, storedRequestProblems } from "../../src/services/request-bounds.js";

/**
 * Bounded requests (docs/contract.md, "Bounded requests"; issue #30 items 2 and 13): the work of a creation body's checks is
 * bounded by its structure, not by its size, and what a task stores is bounded field by field by
 * one rule. Work is asserted by counting it (cells of the distance tables), never by a clock.
 */

/** Optimal string alignment distance, the whole table: the oracle the banded one must agree with. */
function osa(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

/** The suggestion the unbounded rule gave (issue #23): the closest known field within one or two edits. */
function meantByOracle(name: string, known: readonly string[]): string | null {
  if (known.includes(name) || name.length > 80) return null;
  const n = name
    .replace(/([a-z0-9])([A-Z])/g, "$1_$2")
    .toLowerCase()
    .replace(/[-\s.]/g, "_");
  const cross: Record<string, string> = { mode: "video_mode", video_mode: "mode", ratio: "aspect_ratio" };
  if (cross[n] && known.includes(cross[n])) return cross[n];
  let best: { field: string; distance: number } | null = null;
  for (const field of known) {
    if (n === field) return field;
    const distance = osa(n, field);
    const allowed = Math.min(n.length, field.length) <= 5 ? 1 : 2;
    if (distance <= allowed && (!best || distance < best.distance)) best = { field, distance };
  }
  return best?.field ?? null;
}

describe("near-miss suggestions: O(fields), whatever the names", () => {
  const image = knownFields("image");
  // Most cells one name can cost: a band of 2·2+1 cells per character (names over 32 characters are
  // no near miss) against every known field.
  const PER_NAME = image.length * 5 * 33;

  it("suggest what the whole-table distance suggested (random names near the known ones)", () => {
    const near = fc.oneof(
      fc
        .constantFrom(...image)
        .chain((f) =>
          fc
            .tuple(fc.nat(f.length), fc.constantFrom("", "x", "_", "-", "A"), fc.nat(3))
            .map(([at, ins, drop]) => f.slice(0, at) + ins + f.slice(at + drop)),
        ),
      fc.string({ maxLength: 40 }),
    );
    fc.assert(
      fc.property(near, (name) => {
        expect(meantField(name, image)).toBe(meantByOracle(name, image));
      }),
      { numRuns: 3000 },
    );
    expect(
      ["callbak_url", "metdata", "promt", "callbackUrl", "image_url", "seed"].map((n) => meantField(n, image)),
    ).toEqual(["callback_url", "metadata", "prompt", "callback_url", "image_urls", null]);
  });

  it("repro 2: 12,000 field names cost at most a bounded number of cells each (the unbounded table cost up to 81·22 per known field)", () => {
    for (const length of [4, 6, 12, 20, 31, 80]) {
      const work: NearMissWork = { cells: 0 };
      let worst = 0;
      for (let i = 0; i < 12_000; i++) {
        const before = work.cells;
        meantField(
          `${"callback_url_".repeat(7).slice(0, Math.max(0, length - 5))}${String(i).padStart(5, "0")}`.slice(
            0,
            length,
          ),
          image,
          work,
        );
        worst = Math.max(worst, work.cells - before);
      }
      expect(worst).toBeLessThanOrEqual(PER_NAME);
      expect(work.cells).toBeLessThanOrEqual(12_000 * PER_NAME);
      // Names longer than any near miss are not even compared.
      if (length > 32) expect(work.cells).toBe(0);
    }
  });

  it("repro 2: a body over the field count is refused by one count, before any suggestion is worked out", () => {
    const body: Record<string, unknown> = { model: "p-image", mode: "generate", prompt: "a fox", count: 1 };
    for (let i = 0; i < 12_000; i++) body[`callbak_url${i}`] = i;
    const work: NearMissWork = { cells: 0 };
    expect(fieldCountProblem(body)).toEqual({
      field: "(fields)",
      message: `at most ${REQUEST_BOUNDS.maxFields} fields are accepted in a request body`,
    });
    expect(nearMissProblems("image", body, work)).toEqual([]);
    expect(work.cells).toBe(0);
    expect(storedRequestProblems(body)).toEqual([fieldCountProblem(body)]);
    const within = Object.fromEntries(Object.entries(body).slice(0, REQUEST_BOUNDS.maxFields));
    expect(fieldCountProblem(within)).toBeNull();
  });

  it("only the first maxSuggestedFields unknown fields of a body get a suggestion", () => {
    const body: Record<string, unknown> = { model: "p-image" };
    for (let i = 0; i < 40; i++) body[`promt${"x".repeat(i % 2)}${i}`] = i;
    body.callbak_url = "https://example.com";
    const work: NearMissWork = { cells: 0 };
    nearMissProblems("image", body, work);
    expect(work.cells).toBeLessThanOrEqual(REQUEST_BOUNDS.maxSuggestedFields * PER_NAME);
  });
});

describe("what a task stores: one rule over every field", () => {
  const base = { model: "p-image", mode: "generate", prompt: "a fox", count: 1 };

  it("repro 13: image_urls of 1 MiB and a resolution of 895 KiB are refused, naming the field", () => {
    const urls = Array.from({ length: 17 }, (_, i) => `https://cdn.example.com/${i}.png`);
    expect(storedRequestProblems({ ...base, image_urls: urls })).toEqual([
      { field: "image_urls", message: `must have at most ${REQUEST_BOUNDS.maxArrayItems} items` },
    ]);
    const long = [`https://cdn.example.com/${"a".repeat(1024 * 1024)}.png`];
    expect(storedRequestProblems({ ...base, image_urls: long })).toEqual([
      { field: "image_urls.0", message: `must be at most ${REQUEST_BOUNDS.maxStringBytes} bytes (UTF-8)` },
    ]);
    expect(storedRequestProblems({ ...base, resolution: "9".repeat(895 * 1024) })).toEqual([
      { field: "resolution", message: `must be at most ${REQUEST_BOUNDS.maxStringBytes} bytes (UTF-8)` },
    ]);
  });

  it("any field at any depth, counted in UTF-8 bytes; the prompt keeps its own bound", () => {
    const cjk = "漢".repeat(Math.floor(REQUEST_BOUNDS.maxStringBytes / 3) + 1);
    expect(cjk.length).toBeLessThan(REQUEST_BOUNDS.maxStringBytes);
    expect(storedRequestProblems({ ...base, style: { names: [cjk] } })).toEqual([
      { field: "style.names.0", message: `must be at most ${REQUEST_BOUNDS.maxStringBytes} bytes (UTF-8)` },
    ]);
    expect(storedRequestProblems({ ...base, prompt: "p".repeat(32_768) })).toEqual([]);
    let deep: unknown = "x".repeat(REQUEST_BOUNDS.maxStringBytes + 1);
    for (let i = 0; i < 60; i++) deep = [deep];
    expect(storedRequestProblems({ ...base, deep })).toEqual([
      { field: `deep${".0".repeat(60)}`, message: `must be at most ${REQUEST_BOUNDS.maxStringBytes} bytes (UTF-8)` },
    ]);
    const wide = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, i]));
    expect(storedRequestProblems({ ...base, params: wide })).toEqual([
      { field: "params", message: `must have at most ${REQUEST_BOUNDS.maxObjectKeys} keys` },
    ]);
  });

  it("names at most 20 problems, however many values are bad", () => {
    const bad = Object.fromEntries(
      Array.from({ length: 60 }, (_, i) => [`p${i}`, "x".repeat(REQUEST_BOUNDS.maxStringBytes + 1)]),
    );
    expect(storedRequestProblems(bad)).toHaveLength(20);
  });

  it("a task's stored bytes are the UTF-8 bytes of the text it stores", () => {
    expect(storedBytesOf({ a: "ab", b: "漢", c: null, d: 12, e: "😀" })).toBe(2 + 3 + 4);
  });
});
