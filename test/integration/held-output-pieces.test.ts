import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterEach, describe, expect, it, vi } from "vitest";
import { OUTPUT_PIECE_CHARS, OUTPUT_ROW_MAX_CHARS } from "../../src/core/stored-output.js";
import { openDatabase } from "../../src/db/sqlite/open.js";
import type { SqliteStore } from "../../src/db/sqlite/store.js";
import { sqliteStore } from "../../src/open-store.js";
import { OffThreadJson } from "../../src/upstream/json-offload.js";
import { HeldJsonPieces } from "../../src/upstream/json-text.js";
import { parseTask } from "../../src/upstream/parse.js";
import { memoryStore } from "../helpers/memory-store.js";

/**
 * Issue #38 item 7: a 7 MB output's pieces reached the main heap as 64 Ki-char messages from the
 * parse worker (GC pauses of 16-23 ms while they landed). Held, they stay in the worker: the main
 * thread gets a key and a count, and a SQLite store takes each piece as UTF-8 bytes moved from the
 * worker (no string of the output here), inserted by the server's own connection in its group
 * commit: the worker's own inserts had held the write lock while a group commit slept behind them.
 */
describe("long outputs held by the parse worker", () => {
  const NOW = 1_800_000_000_000;
  let dir: string | undefined;
  afterEach(() => {
    vi.restoreAllMocks();
    if (dir) rmSync(dir, { recursive: true, force: true });
    dir = undefined;
  });

  /** An output of several pieces, surrogate pairs across every boundary ("x" first), and its stored text. */
  const output = { s: `x${"😀".repeat(3 * OUTPUT_PIECE_CHARS)}`, images: [{ url: "https://cdn.test/a.png" }] };
  const stored = JSON.stringify(output);
  const answer = Buffer.from(JSON.stringify({ data: { id: "t1", status: "succeeded", output } }));

  /** Parses the answer holding its long output; counts the characters of every message the worker sent here, and the bytes moved. */
  async function parsedHeld(parser: OffThreadJson) {
    const received = { chars: 0, bytes: 0 };
    const settle = (OffThreadJson.prototype as unknown as Record<string, (reply: unknown) => void>).settle!;
    vi.spyOn(
      OffThreadJson.prototype as unknown as Record<string, (reply: unknown) => void>,
      "settle",
    ).mockImplementation(function (this: unknown, reply: unknown) {
      const bytes = (reply as { bytes?: Uint8Array }).bytes;
      if (bytes !== undefined) received.bytes += bytes.byteLength;
      received.chars += JSON.stringify({ ...(reply as object), bytes: undefined }).length;
      return settle.call(this, reply);
    });
    const parsed = await parser.parse(
      { chunks: [answer], size: answer.length, text: answer.toString("utf8") },
      { holdLongOutputs: true },
    );
    if (!parsed.ok) throw new Error("parsed");
    const long = parseTask(parsed.value)?.output;
    if (!(long instanceof HeldJsonPieces)) throw new Error("a long output stays in the worker");
    return { held: long.held, received };
  }

  async function fileStore(): Promise<SqliteStore> {
    dir = mkdtempSync(join(tmpdir(), "genrelay-held-"));
    return sqliteStore(openDatabase(join(dir, "relay.db")));
  }

  async function storedText(store: SqliteStore, ref: string): Promise<string> {
    let text = "";
    for await (const piece of store.outputs.pieces(ref)) text += piece;
    return text;
  }

  it("pieces come as bytes, written by the server's connection in its group commit; no output text reaches this thread", async () => {
    expect(stored.length).toBeGreaterThan(OUTPUT_ROW_MAX_CHARS);
    const parser = new OffThreadJson();
    const store = await fileStore();
    try {
      const { held, received } = await parsedHeld(parser);
      expect(held.count).toBe(Math.ceil(stored.length / OUTPUT_PIECE_CHARS));
      const units = vi.spyOn(store.attemptCommits, "runAtomic");
      await store.outputs.write("out_held", held, NOW);
      // The answer's small rest and one short reply per piece: not the 0.8 M characters of the output,
      // which came as bytes, one unit of the group commit each (no other connection wrote the file).
      expect(received.chars).toBeLessThan(20_000);
      expect(received.bytes).toBe(Buffer.byteLength(stored));
      expect(units).toHaveBeenCalledTimes(held.count);
      expect(await storedText(store, "out_held")).toBe(stored);
      const rows = store.database.sqlite
        .prepare("SELECT seq, last, bytes, created_at AS at FROM task_output_pieces WHERE ref = ? ORDER BY seq")
        .all("out_held") as Array<{ seq: number; last: number; bytes: number; at: number }>;
      expect(rows.map((r) => r.seq)).toEqual([...Array(held.count).keys()]);
      expect(rows.map((r) => r.last)).toEqual([...Array(held.count - 1).fill(0), 1]);
      expect(rows.reduce((n, r) => n + r.bytes, 0)).toBe(Buffer.byteLength(stored));
      expect(new Set(rows.map((r) => r.at))).toEqual(new Set([NOW]));
      // Taken once: the worker has forgotten them.
      await expect(store.outputs.write("out_again", held, NOW)).rejects.toThrow(
        "the parse worker: pieces no longer held",
      );
    } finally {
      await store.close();
      await parser.close();
    }
  });

  it("a store the worker cannot open (in memory) fetches the pieces one at a time and writes them itself", async () => {
    const parser = new OffThreadJson();
    const store = memoryStore();
    try {
      const { held } = await parsedHeld(parser);
      await store.outputs.write("out_mem", held, NOW);
      expect(await storedText(store, "out_mem")).toBe(stored);
    } finally {
      await store.close();
      await parser.close();
    }
  });

  it("a GC after the parse leaves the pieces held while the write still holds them (fourteenth round)", async () => {
    // The transition's patch keeps only the inner HeldPieces, as parsedHeld returns: the wrapper
    // around it is garbage at once. Its collection dropped the pieces in the worker before the write.
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    const parser = new OffThreadJson();
    const store = await fileStore();
    try {
      const { held } = await parsedHeld(parser);
      for (let i = 0; i < 3; i++) {
        gc();
        // Finalizers run in a task of their own after the GC that found their object gone.
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await store.outputs.write("out_after_gc", held, NOW);
      expect(await storedText(store, "out_after_gc")).toBe(stored);
    } finally {
      await store.close();
      await parser.close();
    }
  });

  it("pieces held by a worker that ended are refused, not written short", async () => {
    const parser = new OffThreadJson();
    const store = await fileStore();
    try {
      const { held } = await parsedHeld(parser);
      await parser.close();
      await expect(store.outputs.write("out_lost", held, NOW)).rejects.toThrow(
        "the parse worker holding the pieces has ended",
      );
      expect(store.database.sqlite.prepare("SELECT count(*) FROM task_output_pieces").pluck().get()).toBe(0);
    } finally {
      await store.close();
    }
  });
});
