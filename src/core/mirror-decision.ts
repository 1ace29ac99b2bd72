import { outputUrls, outputUrlsOfPieces } from "../mirror/output-urls.js";

/**
 * Whether a task that succeeded upstream waits in phase mirroring for copies of its output's
 * files before task.succeeded (docs/contract.md, "Outputs"): only when its output has files to
 * copy and its client has a bucket. The client's bucket is read only when there are files, so a
 * task without any costs no read.
 */
export async function mirrorsOutput(
  output: string | readonly string[] | null,
  bucketOfClient: () => Promise<string | null | undefined>,
): Promise<boolean> {
  const urls = typeof output === "string" || output === null ? outputUrls(output) : outputUrlsOfPieces(output);
  return urls.length > 0 && ((await bucketOfClient()) ?? null) !== null;
}
