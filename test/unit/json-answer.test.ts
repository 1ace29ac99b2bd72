import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { jsonAnswer } from "../../src/http/json-answer.js";
import { PiecedJsonText } from "../../src/upstream/json-text.js";

// Issue #38 item 7: a stored output in pieces is read as UTF-8 bytes (OutputStore.bytes) and sent as
// those bytes: never decoded to strings on the event loop and encoded again for the answer.

/** The answer's body as the chunks the stream gave, in order. */
async function chunksOf(res: Response): Promise<Uint8Array[]> {
  const chunks: Uint8Array[] = [];
  const reader = res.body!.getReader();
  for (let next = await reader.read(); !next.done; next = await reader.read()) chunks.push(next.value);
  return chunks;
}

describe("jsonAnswer with an output stored in pieces", () => {
  it("sends each stored piece's bytes as they were read, the JSON around encoded, byte for byte", async () => {
    const stored = ['{"s":"x😀', '\\"é\u2028","n":[1,', "2]}"].map((text) => Buffer.from(text));
    const output = new PiecedJsonText(async function* () {
      yield* stored;
    });
    const app = new Hono().get("/", (c) => jsonAnswer(c, { data: { id: "t" }, output, usage: 1 }, 200));
    const res = await app.request("/");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    const chunks = await chunksOf(res);
    // The very buffers the store gave (no TextEncoder pass over them), between the encoded rest.
    expect(chunks.slice(1, 4)).toEqual(stored);
    for (const [i, piece] of stored.entries()) expect(chunks[i + 1]).toBe(piece);
    const body = Buffer.concat(chunks).toString("utf8");
    expect(body).toBe(`{"data":{"id":"t"},"output":${Buffer.concat(stored).toString("utf8")},"usage":1}`);
    expect(JSON.parse(body).output).toEqual({ s: 'x😀"é\u2028', n: [1, 2] });
  });
});
