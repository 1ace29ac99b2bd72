import { describe, expect, it } from "vitest";
import { OUTPUT_PIECE_CHARS, outputPieces } from "../../src/core/stored-output.js";
import { OutputMissingError, type Store } from "../../src/store/store.js";
import { client, conformance, fresh, NOW, opts, task } from "../helpers/conformance.js";

/** OutputStore conformance (checklist: store-conformance.md): long outputs in pieces, on both drivers. */
const suite = conformance();

async function readAll(store: Store, ref: string): Promise<string[]> {
  const pieces: string[] = [];
  for await (const piece of store.outputs.pieces(ref)) pieces.push(piece);
  return pieces;
}

/** Text a careless split, encoding or parse would change: surrogate pairs across every boundary, escapes, U+2028. */
const text = `"x${"😀".repeat(OUTPUT_PIECE_CHARS)}\\"\\u0000\u2028é${"ab".repeat(OUTPUT_PIECE_CHARS)}"`;

describe.each(suite.dialects)("OutputStore on %s", (_name, h) => {
  it("write then pieces: the same pieces in order, whole pairs in each, the text back exactly", async () => {
    const store = await h.shared();
    const ref = fresh("out");
    const pieces = outputPieces(text);
    expect(pieces.length).toBe(5);
    await store.outputs.write(ref, pieces, NOW);
    const back = await readAll(store, ref);
    expect(back).toEqual(pieces);
    expect(back.join("")).toBe(text);
    for (const piece of back) expect(/^[\uDC00-\uDFFF]|[\uD800-\uDBFF]$/.test(piece)).toBe(false);
  });

  it("bytes: each piece as its UTF-8 bytes, in order (what an answer sends); a missing ref throws", async () => {
    const store = await h.shared();
    const ref = fresh("out");
    const pieces = outputPieces(text);
    await store.outputs.write(ref, pieces, NOW);
    const back: Uint8Array[] = [];
    for await (const bytes of store.outputs.bytes(ref)) back.push(bytes);
    // Decoded, each piece's bytes give the piece back (whole surrogate pairs in each: UTF-8 of it is exact).
    expect(back.map((b) => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("utf8"))).toEqual(pieces);
    expect(Buffer.concat(back).toString("utf8")).toBe(text);
    const missing = store.outputs.bytes(fresh("out"))[Symbol.asyncIterator]().next();
    await expect(missing).rejects.toThrow(OutputMissingError);
  });

  it("pieces of a ref never written (or swept) throw OutputMissingError; a single piece is its own last", async () => {
    const store = await h.shared();
    await expect(readAll(store, fresh("out"))).rejects.toThrow(OutputMissingError);
    const ref = fresh("out");
    await store.outputs.write(ref, ["[1,2,3]"], NOW);
    expect(await readAll(store, ref)).toEqual(["[1,2,3]"]);
  });

  it("sweep: deletes old refs no task holds, keeps held ones and young ones; each ref once", async () => {
    const { store } = await h.fresh();
    const c = await client(store);
    const held = fresh("out");
    const orphan = fresh("out");
    const young = fresh("out");
    await store.outputs.write(held, ["[", "1]"], NOW);
    await store.outputs.write(orphan, ["[", "2]"], NOW);
    await store.outputs.write(young, ["[3]"], NOW + 10_000);
    // No callback: its task.succeeded is not pending, so the task can be pruned.
    const req = task(c.id, fresh("k"));
    const { task: created } = await store.tasks.create({ ...req, row: { ...req.row, callbackUrl: null } });
    await store.tasks.transition(
      created,
      { status: "succeeded", phase: "done", outputJson: null, outputRef: held, completedAt: NOW },
      opts(),
    );
    expect(await store.outputs.sweep(NOW, 100)).toBe(0);
    expect(await store.outputs.sweep(NOW + 10_000, 100)).toBe(1);
    await expect(readAll(store, orphan)).rejects.toThrow(OutputMissingError);
    expect((await readAll(store, held)).join("")).toBe("[1]");
    expect((await readAll(store, young)).join("")).toBe("[3]");
    expect(await store.outputs.sweep(NOW + 10_000, 100)).toBe(0);
    // Once its task is gone (pruned), a ref is an orphan like any other.
    expect(await store.tasks.pruneFinished(NOW + 1, 100)).toBe(1);
    expect(await store.outputs.sweep(NOW + 10_001, 100)).toBe(2);
    await expect(readAll(store, held)).rejects.toThrow(OutputMissingError);
  });

  it("stored bytes: a held output's pieces count for its client from its transition until the task is pruned; orphans never", async () => {
    const { store } = await h.fresh();
    const c = await client(store);
    const req = task(c.id, fresh("k"));
    const { task: created } = await store.tasks.create({ ...req, row: { ...req.row, callbackUrl: null } });
    const before = await store.tasks.storedBytesOfClient(c.id);
    const ref = fresh("out");
    const pieces = ['{"s":"', "é😀".repeat(1_000), '"}'];
    await store.outputs.write(ref, pieces, NOW);
    await store.outputs.write(fresh("out"), pieces, NOW);
    expect(await store.tasks.storedBytesOfClient(c.id)).toBe(before);
    await store.tasks.transition(
      created,
      { status: "succeeded", phase: "done", outputJson: null, outputRef: ref, completedAt: NOW },
      opts(),
    );
    // Its task.succeeded row (no callback: written, not sent) counts too, as always.
    const events = await store.events.ofTask(created.id);
    const eventBytes = events.reduce((sum, e) => sum + Buffer.byteLength(e.payload), 0);
    expect(await store.tasks.storedBytesOfClient(c.id)).toBe(before + eventBytes + 8 + 6_000);
    expect(await store.tasks.pruneFinished(NOW + 1, 100)).toBe(1);
    expect(await store.tasks.storedBytesOfClient(c.id)).toBe(0);
  });
});
