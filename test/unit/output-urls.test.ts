import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { outputUrls } from "../../src/mirror/output-urls.js";

/** The rule as it was written before the scan: parse, then walk the values in document order (the oracle). */
function byParsing(outputJson: string | null): string[] {
  if (outputJson === null) return [];
  const found: string[] = [];
  const seen = new Set<string>();
  const stack: unknown[] = [JSON.parse(outputJson)];
  let visited = 0;
  while (stack.length > 0 && found.length < 64 && visited++ < 10_000) {
    const value = stack.pop();
    if (typeof value === "string") {
      if (/^https?:\/\//i.test(value) && value.length <= 4096 && !seen.has(value) && URL.canParse(value)) {
        seen.add(value);
        found.push(value);
      }
    } else if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) stack.push(value[i]);
    } else if (value !== null && typeof value === "object") {
      const values = Object.values(value as Record<string, unknown>);
      for (let i = values.length - 1; i >= 0; i--) stack.push(values[i]);
    }
  }
  return found;
}

const urlish = fc.oneof(
  fc.webUrl({ withQueryParameters: true, withFragments: true }),
  fc.constantFrom("http://a.test/x", 'HTTPS://b.test/"q"\\\\é', "http://", "https://c.test/\u2028", "ftp://d.test"),
  fc.string(),
);
const { value } = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small" },
    urlish,
    fc.integer(),
    fc.double({ noNaN: true, noDefaultInfinity: true }),
    fc.boolean(),
    fc.constant(null),
    fc.array(tie("value"), { maxLength: 6 }),
    fc.dictionary(
      fc.oneof(fc.string(), fc.constantFrom("url", "__proto__", "a:b", "https://key.test/")),
      tie("value"),
      { maxKeys: 5 },
    ),
  ),
}));

describe("outputUrls scans the stored text", () => {
  it("finds what parsing and walking finds, in the same order, for any output", () => {
    fc.assert(
      fc.property(value, (v) => {
        const text = JSON.stringify(v);
        expect(outputUrls(text)).toEqual(byParsing(text));
      }),
      { numRuns: 600 },
    );
  });

  it("keeps the caps: 64 URLs, and nothing past the first 10,000 values", () => {
    const many = JSON.stringify(Array.from({ length: 100 }, (_, i) => ({ n: i, url: `https://cdn.test/${i}.png` })));
    expect(outputUrls(many)).toEqual(byParsing(many));
    expect(outputUrls(many)).toHaveLength(64);
    const late = JSON.stringify({ pad: Array.from({ length: 12_000 }, (_, i) => i), url: "https://cdn.test/late.png" });
    expect(outputUrls(late)).toEqual([]);
    expect(byParsing(late)).toEqual([]);
    const justIn = JSON.stringify({ pad: Array.from({ length: 9_997 }, (_, i) => i), url: "https://cdn.test/in.png" });
    expect(outputUrls(justIn)).toEqual(["https://cdn.test/in.png"]);
    expect(byParsing(justIn)).toEqual(["https://cdn.test/in.png"]);
  });

  it("no output, no URLs", () => {
    expect(outputUrls(null)).toEqual([]);
    expect(outputUrls("null")).toEqual([]);
  });
});
