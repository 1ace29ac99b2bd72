import fc from "fast-check";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import { UpstreamClient } from "../../src/upstream/client.js";
import { readdirSync, readFileSync } from "node:fs";
import { Worker } from "node:worker_threads";
import { BACKGROUND_NICE } from "../../src/background-thread.js";
import { BYTES_PER_TURN } from "../../src/next-turn.js";
import { OffThreadJson } from "../../src/upstream/json-offload.js";
import { JsonPieces, JsonText, jsonTextOf } from "../../src/upstream/json-text.js";
import { OUTPUT_PIECE_CHARS, OUTPUT_ROW_MAX_CHARS } from "../../src/upstream/output-pieces.js";
import { parseJson, parseTask, parseTaskList } from "../../src/upstream/parse.js";
import type { UpstreamTask } from "../../src/upstream/types.js";

/**
 * Large upstream answers are parsed in a worker thread (issue #38 item 7): the result must be the
 * inline parser's, with outputs as JsonText, and the large text never parsed on this thread.
 */
const everything = new OffThreadJson(0);
afterAll(() => everything.close());
afterEach(() => {
  vi.restoreAllMocks();
});

/** A task as the rest of the relay sees it: the output as its stored text. */
function asStored(task: UpstreamTask | null) {
  if (task === null) return null;
  const { raw: _raw, output, ...rest } = task;
  return { ...rest, output: jsonTextOf(output) };
}

const taskBody = fc.record(
  {
    id: fc.oneof(fc.string(), fc.integer()),
    status: fc.constantFrom("queued", "running", "succeeded", "failed", "weird"),
    output: fc.jsonValue(),
    data: fc.record({ id: fc.string(), output: fc.jsonValue(), status: fc.string() }, { requiredKeys: [] }),
    usage: fc.record({ points_charged: fc.jsonValue() }),
    error: fc.jsonValue(),
  },
  { requiredKeys: [] },
);

describe("OffThreadJson", () => {
  it("gives the inline parser's task for any body, outputs as their JSON text", async () => {
    await fc.assert(
      fc.asyncProperty(taskBody, async (body) => {
        const text = JSON.stringify(body);
        const off = await everything.parse(text);
        const inline = parseJson(text);
        expect(off.ok).toBe(true);
        if (!off.ok || !inline.ok) return;
        expect(asStored(parseTask(off.value, "fallback"))).toEqual(asStored(parseTask(inline.value, "fallback")));
      }),
      { numRuns: 150 },
    );
  });

  it("gives the inline parser's list page, every item's output as text", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(taskBody, { maxLength: 8 }), fc.option(fc.string()), async (items, next) => {
        const text = JSON.stringify({ data: { items }, next_cursor: next });
        const off = await everything.parse(text);
        const inline = parseJson(text);
        if (!off.ok || !inline.ok) throw new Error("both parse");
        const page = (v: unknown) => {
          const p = parseTaskList(v);
          return p && { ...p, tasks: p.tasks.map(asStored) };
        };
        expect(page(off.value)).toEqual(page(inline.value));
      }),
      { numRuns: 60 },
    );
  });

  it("refuses what parseJson refuses", async () => {
    for (const text of ["", "   ", "{", '{"output": [1,}', "nul"]) {
      expect(await everything.parse(text)).toEqual({ ok: false });
      expect(parseJson(text)).toEqual({ ok: false });
    }
  });

  it("never parses a large answer on this thread: only the body without its output comes back", async () => {
    const output = { images: Array.from({ length: 20_000 }, (_, i) => ({ url: `https://cdn.test/${i}.png`, i })) };
    const text = JSON.stringify({ id: "t1", status: "succeeded", output, usage: { points_charged: 3 } });
    const parser = new OffThreadJson();
    const parse = vi.spyOn(JSON, "parse");
    const parsed = await parser.parse(text);
    await parser.close();
    const sizes = parse.mock.calls.map(([arg]) => String(arg).length);
    expect(Math.max(0, ...sizes)).toBeLessThan(1024);
    if (!parsed.ok) throw new Error("parsed");
    const task = parseTask(parsed.value);
    expect(task?.output).toBeInstanceOf(JsonText);
    expect(asStored(task)).toEqual({
      id: "t1",
      status: "succeeded",
      output: JSON.stringify(output),
      usage: { pointsCharged: 3, pointsRefunded: null },
      error: null,
    });
  });

  it("a worker that ends takes nothing with it: pending answers are parsed inline, the next starts a new one", async () => {
    const parser = new OffThreadJson(0);
    const text = JSON.stringify({ id: "t2", output: { a: [1, 2, 3] } });
    const pending = parser.parse(text);
    await parser.close();
    expect(await pending).toEqual(parseJson(text));
    const again = await parser.parse(text);
    if (!again.ok) throw new Error("parsed");
    expect(jsonTextOf(parseTask(again.value)?.output)).toBe('{"a":[1,2,3]}');
    await parser.close();
  });

  it("an answer given as bytes is decoded and parsed in the worker; a long output comes back in its pieces", async () => {
    // Surrogate pairs straddle every piece boundary ("x" first), as in stored-output-pieces.test.ts.
    const output = { s: `x${"😀".repeat(3 * OUTPUT_PIECE_CHARS)}`, images: [{ url: "https://cdn.test/a.png" }] };
    const stored = JSON.stringify(output);
    expect(stored.length).toBeGreaterThan(OUTPUT_ROW_MAX_CHARS);
    const encoded = Buffer.from(JSON.stringify({ data: { id: "t4", status: "succeeded", output } }));
    const chunks = [encoded.subarray(0, 1000), encoded.subarray(1000)];
    let decodedHere = 0;
    const bytes = {
      chunks,
      size: encoded.length,
      get text() {
        decodedHere++;
        return encoded.toString("utf8");
      },
    };
    const parser = new OffThreadJson();
    const parsed = await parser.parse(bytes);
    await parser.close();
    expect(decodedHere).toBe(0);
    // The caller's chunks are intact: the worker got a copy of its own, moved without another.
    expect(Buffer.concat(chunks).equals(encoded)).toBe(true);
    if (!parsed.ok) throw new Error("parsed");
    const task = parseTask(parsed.value);
    if (!(task?.output instanceof JsonPieces)) throw new Error("a long output comes back in pieces");
    expect(task.output.pieces.length).toBe(Math.ceil(stored.length / OUTPUT_PIECE_CHARS));
    for (const piece of task.output.pieces) {
      expect(piece.length).toBeLessThanOrEqual(OUTPUT_PIECE_CHARS);
      // Well-formed on its own: no lone surrogate, which UTF-8 would turn into U+FFFD.
      expect(Buffer.from(piece, "utf8").toString("utf8")).toBe(piece);
    }
    expect(task.output.pieces.join("")).toBe(stored);
    expect(jsonTextOf(task.output)).toBe(stored);
  });

  it("a large answer's bytes are copied for the worker over several turns, not in one (issue #38 item 7)", async () => {
    const output = {
      images: Array.from({ length: 60_000 }, (_, i) => ({ url: `https://cdn.test/${i}.png`, seed: i })),
    };
    const encoded = Buffer.from(JSON.stringify({ data: { id: "t6", status: "succeeded", output } }));
    expect(encoded.length).toBeGreaterThan(2 * BYTES_PER_TURN);
    const chunks: Uint8Array[] = [];
    for (let at = 0; at < encoded.length; at += 64 * 1024) chunks.push(encoded.subarray(at, at + 64 * 1024));
    const parser = new OffThreadJson();
    // What another request does meanwhile: macrotasks counted until the bytes are handed over.
    let turns = 0;
    let handedOverAfter = -1;
    const tick = () => {
      turns++;
      if (handedOverAfter < 0) setImmediate(tick);
    };
    setImmediate(tick);
    const post = vi.spyOn(Worker.prototype, "postMessage").mockImplementation(function (this: Worker, ...args) {
      handedOverAfter = turns;
      post.mockRestore();
      return this.postMessage(...args);
    });
    const parsed = await parser.parse({ chunks, size: encoded.length, text: encoded.toString("utf8") });
    await parser.close();
    // Over 2 MiB at BYTES_PER_TURN a turn: other turns ran before the handover (none did when it was one copy).
    expect(handedOverAfter).toBeGreaterThanOrEqual(2);
    expect(parsed.ok && jsonTextOf((parsed.value as { data: { output: JsonText } }).data.output)).toBe(
      JSON.stringify(output),
    );
  });

  it("a worker lost with bytes pending parses them inline from the chunks kept here", async () => {
    const parser = new OffThreadJson(0);
    const encoded = Buffer.from(JSON.stringify({ id: "t5", output: { a: "é" } }));
    const pending = parser.parse({ chunks: [encoded], size: encoded.length, text: encoded.toString("utf8") });
    await parser.close();
    expect(await pending).toEqual({ ok: true, value: { id: "t5", output: { a: "é" } } });
  });

  it("small answers stay on the inline path (no worker hop)", async () => {
    const parser = new OffThreadJson();
    const text = JSON.stringify({ id: "t3", output: { url: "https://cdn.test/a.png" } });
    expect(await parser.parse(text)).toEqual(parseJson(text));
    await parser.close();
  });
});

describe("UpstreamClient reads large task answers off the event loop", () => {
  it("a 1 MB output arrives as text equal to the upstream's output", async () => {
    const output = { video_base64: "QUJD".repeat(256 * 1024) };
    const body = JSON.stringify({ data: { id: "up_1", status: "succeeded", output } });
    const client = new UpstreamClient({
      baseUrl: "https://upstream.test",
      apiKey: "k",
      fetch: async () => new Response(body, { status: 200, headers: { "content-type": "application/json" } }),
    });
    const task = await client.getTask("up_1");
    expect(task.output).toBeInstanceOf(JsonText);
    expect(jsonTextOf(task.output)).toBe(JSON.stringify(output));
    expect(task.status).toBe("succeeded");
  });

  it("a large answer that is not JSON is the same malformed_response error", async () => {
    const client = new UpstreamClient({
      baseUrl: "https://upstream.test",
      apiKey: "k",
      fetch: async () => new Response(`{"id":"x","output":"${"a".repeat(300_000)}`, { status: 200 }),
    });
    await expect(client.getTask("x")).rejects.toMatchObject({
      code: "malformed_response",
      message: "malformed upstream response (HTTP 200): response body is not JSON",
    });
  });
});

describe("the parse worker's thread", () => {
  /** Threads of this process at the background nice value (/proc, field 19 of each thread's stat). */
  function nicedThreads(): number {
    if (process.platform !== "linux") return 0;
    return readdirSync("/proc/self/task").filter((tid) => {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, "utf8");
      return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[16]) === BACKGROUND_NICE;
    }).length;
  }

  it.runIf(process.platform === "linux")("runs below the event loop's priority (issue #38 item 7)", async () => {
    const parser = new OffThreadJson(0);
    try {
      const before = nicedThreads();
      expect(await parser.parse('{"id":"t","output":[1]}')).toMatchObject({
        ok: true,
      });
      expect(nicedThreads()).toBe(before + 1);
    } finally {
      await parser.close();
    }
  });
});
