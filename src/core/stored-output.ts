import { newId } from "../ids.js";
import type { NewTaskRow } from "../store/rows.js";
import type { OutputStore } from "../store/store.js";

/**
 * Where a task's output is kept (issue #38 item 7). An output of up to OUTPUT_ROW_MAX_CHARS stays in
 * the task row's output_json. A longer one (a 7 MB answer) is kept out of the row, in pieces of at
 * most OUTPUT_PIECE_CHARS (OutputStore), written before the transition that puts their ref on the
 * task: writing 7 MB in one statement, and every later read of the row (the poller, the lifecycle,
 * RETURNING, the mirror, the workers' claims) copying it back, held the event loop for 100 ms and
 * more each time. Now each step handles one piece, and the row stays small.
 *
 * A webhook body or a list item never carries such an output: it is longer than their size
 * (WEBHOOK_BODY_MAX_BYTES), so they say `output_omitted` without reading it. A task read streams
 * the pieces into its answer (http/json-answer.ts).
 *
 * Crash safety: the pieces are written first, the ref is set by the transition (one transaction
 * with the status and the event), so no task is seen ended before its output is durable. A process
 * killed between the two leaves pieces no task holds: the task is polled again and writes its
 * output anew under another ref, and the pruner sweeps the orphan (OutputStore.sweep).
 */

/** The longest output kept in the task row (UTF-16 units; at least as many UTF-8 bytes). */
export const OUTPUT_ROW_MAX_CHARS = 256 * 1024;

/** One piece of a longer output: at most 192 KiB of UTF-8, one short write and one short read. */
export const OUTPUT_PIECE_CHARS = 64 * 1024;

/** How old a ref no task holds must be before the pruner sweeps it: its transition would have followed at once. */
export const ORPHAN_OUTPUT_AGE_MS = 60 * 60 * 1000;

/** `text` in pieces of at most `size` UTF-16 units, never splitting a surrogate pair (each piece is well-formed on its own). */
export function outputPieces(text: string, size = OUTPUT_PIECE_CHARS): string[] {
  const pieces: string[] = [];
  let start = 0;
  while (start < text.length) {
    let end = Math.min(start + size, text.length);
    const last = text.charCodeAt(end - 1);
    if (end < text.length && last >= 0xd800 && last <= 0xdbff) end--;
    pieces.push(text.slice(start, end));
    start = end;
  }
  return pieces;
}

/**
 * The patch as a transition writes it: an output longer than OUTPUT_ROW_MAX_CHARS written in pieces
 * first and replaced by their ref. Any patch that sets the output sets both columns, so a row never
 * holds an old ref beside a new output.
 */
export async function keepLongOutputApart(
  outputs: Pick<OutputStore, "write">,
  patch: Partial<NewTaskRow>,
  now: number,
): Promise<Partial<NewTaskRow>> {
  const text = patch.outputJson;
  if (text === undefined) return patch;
  if (text === null || text.length <= OUTPUT_ROW_MAX_CHARS) return { ...patch, outputRef: null };
  const ref = newId("out", now);
  await outputs.write(ref, outputPieces(text), now);
  return { ...patch, outputJson: null, outputRef: ref };
}

/**
 * A task's whole output text (null when it has none): for the few readers that need the text itself
 * (the mirror's URL scan, the CLI). Answers stream the pieces instead (core/task-view.ts).
 */
export async function outputTextOf(
  task: { outputJson: string | null; outputRef: string | null },
  outputs: Pick<OutputStore, "pieces">,
): Promise<string | null> {
  if (task.outputJson !== null || task.outputRef === null) return task.outputJson;
  let text = "";
  for await (const piece of outputs.pieces(task.outputRef)) text += piece;
  return text;
}
