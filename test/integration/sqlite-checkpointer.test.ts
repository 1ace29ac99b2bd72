import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { OUTPUT_PIECE_CHARS } from "../../src/core/stored-output.js";
import type { SqliteStore } from "../../src/db/sqlite/store.js";
import { openStore } from "../../src/open-store.js";

// Issue #38 item 7: the server's SQLite connection never checkpoints the WAL itself (a 4 MB
// checkpoint held the event loop 10-16 ms); a worker thread with its own connection does, and the
// WAL stays bounded. A checkpointer that dies hands checkpoints back to the main connection.

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function serverStore(): Promise<{ store: SqliteStore; path: string }> {
  const dir = mkdtempSync(join(tmpdir(), "genrelay-checkpoint-"));
  dirs.push(dir);
  const path = join(dir, "relay.db");
  return { store: (await openStore({ databasePath: path, databaseUrl: null })) as SqliteStore, path };
}

const walBytes = (path: string) => (existsSync(`${path}-wal`) ? statSync(`${path}-wal`).size : 0);

/** One output of `mb` MiB of ASCII, in pieces, through the store's group commit as the server writes it. */
async function writeOutput(store: SqliteStore, ref: string, mb: number): Promise<void> {
  const piece = "x".repeat(OUTPUT_PIECE_CHARS);
  const pieces = Array.from({ length: (mb * 1024 * 1024) / OUTPUT_PIECE_CHARS }, () => piece);
  await store.outputs.write(ref, pieces, Date.now());
}

describe("WAL checkpoints off the event loop (SQLite server store)", () => {
  it("the main connection never checkpoints; the worker's checkpoints keep the WAL bounded", async () => {
    const { store, path } = await serverStore();
    const checkpointer = store.database.checkpointer!;
    expect(checkpointer).not.toBeNull();
    expect(store.database.sqlite.pragma("wal_autocheckpoint", { simple: true })).toBe(0);

    // 8 outputs of 4 MiB: 32 MiB through the WAL. Without checkpoints it would hold all of them.
    let largest = 0;
    for (let i = 0; i < 8; i++) {
      await writeOutput(store, `out_${i}`, 4);
      largest = Math.max(largest, walBytes(path));
      const report = await checkpointer.now();
      // Every frame is in the database file: the next commit starts the WAL over from its beginning.
      expect(report).not.toBeNull();
      expect(report!.checkpointed).toBe(report!.log);
    }
    // One output's frames (4 MiB of text, 64 commits' pages of index: 5.4 MiB) and no more: the WAL
    // was started over after each checkpoint, not grown to the 41 MiB the eight outputs write.
    expect(largest).toBeGreaterThan(4 * 1024 * 1024);
    expect(largest).toBeLessThan(8 * 1024 * 1024);
    await store.close();
    // close() waited for the worker's connection to close: the main one, closing last, removed the WAL.
    expect(existsSync(`${path}-wal`)).toBe(false);
  });

  it("a checkpointer that exits hands checkpoints back to the main connection", async () => {
    const { store } = await serverStore();
    const checkpointer = store.database.checkpointer!;
    // The thread lost as a crash would lose it (the test reaches the private worker on purpose).
    await (checkpointer as unknown as { worker: { terminate(): Promise<number> } }).worker.terminate();
    await expect.poll(() => store.database.sqlite.pragma("wal_autocheckpoint", { simple: true })).toBe(1000);
    await store.close();
  });
});
