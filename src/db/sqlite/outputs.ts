import { and, asc, eq, lt, sql } from "drizzle-orm";
import { OutputMissingError, type OutputStore } from "../../store/store.js";
import { isHeld } from "../../upstream/json-text.js";
import type { SqliteContext } from "./context.js";
import type { Db } from "./open.js";
import { prepared, statement } from "./prepared.js";
import { taskOutputPieces, tasks } from "./schema.js";
import { turnBytes } from "../../next-turn.js";
import { OUTPUT_PIECE_CHARS } from "../../upstream/output-pieces.js";

/**
 * The OutputStore on SQLite. Each piece is one unit of the workers' group commit, awaited before
 * the next, so the pieces of one output are written over as many turns of the event loop, each turn
 * costing one piece (a few hundred KiB) and sharing its fsync with whatever else commits then.
 * Pieces the parse worker still holds (upstream/json-offload.ts) come one at a time as UTF-8 bytes
 * moved from it, inserted as text: no string of the output on this heap, and no second connection
 * writing the file (the parse worker's own inserts held the write lock while a group commit slept
 * behind them in SQLite's busy handler: issue #38 item 7, thirteenth round).
 * Reads are one statement per piece, each in a later turn within the process's bytes a turn; an
 * answer reads them as blobs (bytes), so its output never becomes strings on this heap.
 */
export function sqliteOutputs(s: SqliteContext): OutputStore {
  const db = s.database.db;
  return {
    write: async (ref, pieces, now) => {
      if (isHeld(pieces)) {
        let seq = 0;
        for await (const bytes of pieces.bytes()) {
          const row = { ref, seq, last: seq === pieces.count - 1, bytes, createdAt: now };
          await s.attemptCommits.runAtomic(() => insertBytes(db, row));
          seq++;
        }
        return;
      }
      const count = pieces.length;
      let seq = 0;
      for (const text of pieces) {
        const row = { ref, seq, last: seq === count - 1, text, bytes: Buffer.byteLength(text), createdAt: now };
        await s.attemptCommits.runAtomic(() => insertPiece(db, row));
        seq++;
      }
    },
    pieces: (ref) => readPieces(db, ref),
    bytes: (ref) => readBytes(db, ref),
    sweep: (before, batch) => sweep(s, before, batch),
  };
}

function insertPiece(db: Db, row: typeof taskOutputPieces.$inferInsert): void {
  prepared(db, "outputs.insert", () =>
    db
      .insert(taskOutputPieces)
      .values({
        ref: sql.placeholder("ref"),
        seq: sql.placeholder("seq"),
        last: sql.placeholder("last"),
        text: sql.placeholder("text"),
        bytes: sql.placeholder("bytes"),
        createdAt: sql.placeholder("createdAt"),
      })
      .prepare(),
  ).run({ ...row, last: row.last ? 1 : 0 });
}

/** A piece given as its UTF-8 bytes, stored as the same text (CAST: SQLite reads the bytes in the database's UTF-8). */
function insertBytes(
  db: Db,
  row: { ref: string; seq: number; last: boolean; bytes: Uint8Array; createdAt: number },
): void {
  statement(
    db,
    "outputs.insertBytes",
    "INSERT INTO task_output_pieces (ref, seq, last, text, bytes, created_at) VALUES (?, ?, ?, CAST(? AS TEXT), ?, ?)",
  ).run(row.ref, row.seq, row.last ? 1 : 0, asBuffer(row.bytes), row.bytes.byteLength, row.createdAt);
}

/** The same bytes as a Buffer (better-sqlite3 binds a Buffer as a blob), not copied. */
const asBuffer = (bytes: Uint8Array) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

async function* readPieces(db: Db, ref: string): AsyncGenerator<string> {
  const statement = prepared(db, "outputs.piece", () =>
    db
      .select({ text: taskOutputPieces.text, last: taskOutputPieces.last })
      .from(taskOutputPieces)
      .where(and(eq(taskOutputPieces.ref, sql.placeholder("ref")), eq(taskOutputPieces.seq, sql.placeholder("seq"))))
      .prepare(),
  );
  for (let seq = 0; ; seq++) {
    // better-sqlite3 answers at once: each piece waits for a later turn with room for it in the
    // process's bytes a turn (next-turn.ts, TurnBytes), which eight readers of 7 MB outputs share.
    if (seq > 0) await turnBytes.take(OUTPUT_PIECE_CHARS);
    const piece = statement.get({ ref, seq });
    if (piece === undefined) throw new OutputMissingError(ref, seq);
    yield piece.text;
    if (piece.last) return;
  }
}

/**
 * The pieces as their UTF-8 bytes: SQLite hands each text back as a blob (the database's UTF-8,
 * unchanged), which better-sqlite3 copies into a Buffer outside the V8 heap. Read as text, a 7 MB
 * output was 7 MB of young strings per read (two or three scavenges) and a TextEncoder pass more.
 */
async function* readBytes(db: Db, ref: string): AsyncGenerator<Uint8Array> {
  const read = statement(
    db,
    "outputs.pieceBytes",
    "SELECT CAST(text AS BLOB) AS bytes, last FROM task_output_pieces WHERE ref = ? AND seq = ?",
  );
  for (let seq = 0; ; seq++) {
    if (seq > 0) await turnBytes.take(OUTPUT_PIECE_CHARS);
    const piece = read.get(ref, seq) as { bytes: Buffer | null; last: number } | undefined;
    if (piece === undefined) throw new OutputMissingError(ref, seq);
    // An empty text comes back as an empty blob, or as NULL from some builds: no bytes either way.
    yield piece.bytes ?? new Uint8Array(0);
    if (piece.last) return;
  }
}

/** Refs no task holds, written before `before`; each deleted in a write of its own (an output's pieces are megabytes). */
async function sweep(s: SqliteContext, before: number, batch: number): Promise<number> {
  const db = s.database.db;
  const refs = db
    .select({ ref: taskOutputPieces.ref })
    .from(taskOutputPieces)
    .where(and(eq(taskOutputPieces.seq, 0), lt(taskOutputPieces.createdAt, before), unheld))
    .orderBy(asc(taskOutputPieces.createdAt))
    .limit(batch)
    .all()
    .map((r) => r.ref);
  for (const ref of refs) {
    await s.attemptCommits.runAtomic(() =>
      db
        .delete(taskOutputPieces)
        .where(and(eq(taskOutputPieces.ref, ref), unheld))
        .run(),
    );
  }
  return refs.length;
}

/** No task holds the piece's ref (checked again as it is deleted). */
const unheld = sql`NOT EXISTS (SELECT 1 FROM ${tasks} WHERE ${tasks.outputRef} = ${taskOutputPieces.ref})`;
