import { OutputMissingError, type OutputStore } from "../../store/store.js";
import { isHeld } from "../../upstream/json-text.js";
import type { PgContext } from "./context.js";
import { turnBytes } from "../../next-turn.js";
import { OUTPUT_PIECE_CHARS } from "../../upstream/output-pieces.js";

/** No task holds the piece's ref. */
const UNHELD = "NOT EXISTS (SELECT 1 FROM tasks t WHERE t.output_ref = p.ref)";

/**
 * The OutputStore on PostgreSQL. The database works apart from the event loop already; what stays
 * on the loop is each statement's encoding and each answer's decoding, so a piece is one statement
 * (a few hundred KiB), never the whole text in one message or one result.
 */
export function pgOutputs(s: PgContext): OutputStore {
  const { q, one } = s;
  async function* readPieces(ref: string): AsyncGenerator<string> {
    for (let seq = 0; ; seq++) {
      // Each answer is decoded on the event loop: eight readers of 7 MB outputs share the process's
      // bytes a turn (next-turn.ts, TurnBytes), as on SQLite (db/sqlite/outputs.ts).
      if (seq > 0) await turnBytes.take(OUTPUT_PIECE_CHARS);
      const piece = await one("SELECT text, last FROM task_output_pieces WHERE ref = $1 AND seq = $2", [ref, seq]);
      if (piece === undefined) throw new OutputMissingError(ref, seq);
      yield piece.text as string;
      if (piece.last === true) return;
    }
  }
  return {
    write: async (ref, pieces, now) => {
      // Pieces the parse worker still holds come here one at a time (PostgreSQL has no worker path).
      const count = isHeld(pieces) ? pieces.count : pieces.length;
      let seq = 0;
      for await (const text of isHeld(pieces) ? pieces.read() : pieces) {
        await q(
          "INSERT INTO task_output_pieces (ref, seq, last, text, bytes, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
          [ref, seq, seq === count - 1, text, Buffer.byteLength(text), now],
        );
        seq++;
      }
    },
    pieces: readPieces,
    // pg decodes each answer to a string (a bytea would come as hex, twice the text): encoded here,
    // one piece at a time, as the answer sends it.
    bytes: async function* (ref) {
      for await (const text of readPieces(ref)) yield Buffer.from(text);
    },
    sweep: async (before, batch) => {
      // `before` is an hour back: a writer's transition follows its pieces at once, so a ref that old
      // and on no task is one whose transition never came (or whose task was pruned).
      const refs = (
        await q(
          `SELECT p.ref FROM task_output_pieces p
            WHERE p.seq = 0 AND p.created_at < $1 AND ${UNHELD}
            ORDER BY p.created_at LIMIT $2`,
          [before, batch],
        )
      ).map((r) => r.ref as string);
      // Each ref deleted by a statement of its own (an output's pieces are megabytes), checked again.
      for (const ref of refs) await q(`DELETE FROM task_output_pieces p WHERE p.ref = $1 AND ${UNHELD}`, [ref]);
      return refs.length;
    },
  };
}
