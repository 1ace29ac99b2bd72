import { outputUrls, outputUrlsOfPieces } from "../mirror/output-urls.js";
import { type HeldPieces, isHeld } from "../upstream/json-text.js";

/**
 * Whether a task that succeeded upstream waits in phase mirroring for copies of its output's
 * files before task.succeeded (docs/contract.md, "Outputs"): only when its output has files to
 * copy and its client has a bucket. The client's bucket is read only when there are files, so a
 * task without any costs no read; but a long output still held by the parse worker is fetched
 * here only for a client with a bucket (fetching 7 MB costs more than the read).
 */
export async function mirrorsOutput(
  output: string | readonly string[] | HeldPieces | null,
  bucketOfClient: () => Promise<string | null | undefined>,
): Promise<boolean> {
  const hasBucket = async () => ((await bucketOfClient()) ?? null) !== null;
  if (output !== null && typeof output !== "string" && isHeld(output)) {
    if (!(await hasBucket())) return false;
    const pieces: string[] = [];
    for await (const piece of output.read()) pieces.push(piece);
    return outputUrlsOfPieces(pieces).length > 0;
  }
  const urls = typeof output === "string" || output === null ? outputUrls(output) : outputUrlsOfPieces(output);
  return urls.length > 0 && (await hasBucket());
}
