import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { outputUrls, outputUrlsOfPieces } from "../../src/mirror/output-urls.js";

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

/** `text` cut every `size` characters (the scan must not care where: a cut may fall inside anything). */
const cut = (text: string, size: number) =>
  Array.from({ length: Math.ceil(text.length / size) }, (_, i) => text.slice(i * size, (i + 1) * size));

describe("outputUrlsOfPieces: a long output's URLs from its stored pieces (issue #38 item 7)", () => {
  it("finds what the whole text's scan finds, wherever the cuts fall, at and around the caps", () => {
    fc.assert(
      fc.property(value, fc.nat(80), fc.nat(10_050), fc.integer({ min: 1, max: 400 }), (v, urls, pad, size) => {
        const text = JSON.stringify({
          urls: Array.from({ length: urls }, (_, i) => `https://cdn.test/${i}.png`),
          pad: Array.from({ length: pad % 3 === 0 ? pad : 0 }, (_, i) => i),
          v,
        });
        expect(outputUrlsOfPieces(cut(text, size))).toEqual(outputUrls(text));
      }),
      { numRuns: 300 },
    );
    for (const text of ["null", '"https://a.test/x"', '{"https://key.test/" : "https://v.test/"}'])
      for (const size of [1, 2, 3, 7]) expect(outputUrlsOfPieces(cut(text, size))).toEqual(outputUrls(text));
    // A cut right after a key that looks like the 64th URL: the first piece alone would take it for a value.
    const urls = Array.from({ length: 63 }, (_, i) => `https://cdn.test/${i}.png`);
    const head = `[${urls.map((u) => JSON.stringify(u)).join(",")},{"https://key.test/"`;
    const pieces = [head, ':1},"https://cdn.test/last.png"]'];
    expect(outputUrlsOfPieces(pieces)).toEqual([...urls, "https://cdn.test/last.png"]);
    expect(outputUrlsOfPieces(pieces)).toEqual(outputUrls(pieces.join("")));
  });

  it("joins only the pieces the scan needs: 64 URLs in the first piece leave the others unread", () => {
    const head = JSON.stringify(Array.from({ length: 100 }, (_, i) => `https://cdn.test/${i}.png`));
    const pieces = [head, ...Array.from({ length: 99 }, () => "x")];
    // Every piece after the first throws when read.
    const guarded = new Proxy(pieces, {
      get: (target, key, receiver) => {
        if (typeof key === "string" && /^\d+$/.test(key) && Number(key) > 0) throw new Error(`piece ${key} was read`);
        return Reflect.get(target, key, receiver);
      },
    });
    expect(outputUrlsOfPieces(guarded)).toHaveLength(64);
  });
});
