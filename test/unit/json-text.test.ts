import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { JsonText, stringifyWithText } from "../../src/upstream/json-text.js";

describe("stringifyWithText", () => {
  it("writes the rest as JSON.stringify does and each JsonText as its text, whatever the strings around it", () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.json(), fc.string({ unit: "binary" }), (rest, text, s) => {
        // A string of the rest that looks like a marker's start is written as itself.
        const value = { rest, s: `\u0000genrelay-text:${s}:0`, o: new JsonText(text), list: [new JsonText(text)] };
        const plain = JSON.stringify({ rest, s: value.s });
        expect(stringifyWithText(value)).toBe(`${plain.slice(0, -1)},"o":${text},"list":[${text}]}`);
      }),
    );
  });

  it("without a JsonText it is JSON.stringify; after a throw, JSON.stringify of a JsonText still parses it", () => {
    expect(stringifyWithText({ a: [1, "x", null] })).toBe('{"a":[1,"x",null]}');
    expect(() => stringifyWithText({ o: new JsonText("[1]"), n: 1n })).toThrow(TypeError);
    expect(JSON.stringify({ o: new JsonText('{"b": 12345678901234567890}') })).toBe('{"o":{"b":12345678901234567000}}');
  });
});
