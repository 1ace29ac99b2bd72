import { newId } from "../ids.js";
import type { NewTaskRow } from "../store/rows.js";
import type { OutputStore } from "../store/store.js";
import type { HeldPieces } from "../upstream/json-text.js";
import { OUTPUT_ROW_MAX_CHARS, outputPieces } from "../upstream/output-pieces.js";

// Where the cut is made lives with the parse worker that makes it (upstream/json-offload.ts).
export { OUTPUT_PIECE_CHARS, OUTPUT_ROW_MAX_CHARS, outputPieces } from "../upstream/output-pieces.js";

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

/** How old a ref no task holds must be before the pruner sweeps it: its transition would have followed at once. */
export const ORPHAN_OUTPUT_AGE_MS = 60 * 60 * 1000;

/** A task patch whose output may be a long one still in the parse worker's pieces (upstream/json-offload.ts). */
export type OutputPatch = Partial<NewTaskRow> & { longOutput?: readonly string[] | HeldPieces };

/**
 * The patch as a transition writes it: an output longer than OUTPUT_ROW_MAX_CHARS written in pieces
 * first and replaced by their ref. Any patch that sets the output sets both columns, so a row never
 * holds an old ref beside a new output.
 */
export async function keepLongOutputApart(
  outputs: Pick<OutputStore, "write">,
  { longOutput, ...patch }: OutputPatch,
  now: number,
): Promise<Partial<NewTaskRow>> {
  if (longOutput !== undefined) {
    // Cut by the parse worker: stored as it came, one piece at a time, never joined here (and, held
    // by the worker, written by it where the store can).
    const ref = newId("out", now);
    await outputs.write(ref, longOutput, now);
    return { ...patch, outputJson: null, outputRef: ref };
  }
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
