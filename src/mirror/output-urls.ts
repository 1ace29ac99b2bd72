/**
 * Which files of a task's output are copied, and where they go. The output is the upstream's JSON,
 * kept verbatim and read tolerantly (its keys are "not shown" in the upstream reference): every
 * http(s) URL in it, in document order, each once.
 */

const MAX_URLS = 64;
const MAX_URL_LENGTH = 4096;

export function outputUrls(outputJson: string | null): string[] {
  if (outputJson === null) return [];
  let output: unknown;
  try {
    output = JSON.parse(outputJson);
  } catch {
    return [];
  }
  const found: string[] = [];
  const seen = new Set<string>();
  // Iterative walk with a visit cap: an outside party's JSON.
  const stack: unknown[] = [output];
  let visited = 0;
  while (stack.length > 0 && found.length < MAX_URLS && visited++ < 10_000) {
    const value = stack.pop();
    if (typeof value === "string") {
      if (/^https?:\/\//i.test(value) && value.length <= MAX_URL_LENGTH && !seen.has(value) && URL.canParse(value)) {
        seen.add(value);
        found.push(value);
      }
    } else if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) stack.push(value[i]);
    } else if (value !== null && typeof value === "object") {
      const values = Object.values(value as Record<string, unknown>);
      for (let i = values.length - 1; i >= 0; i--) stack.push(values[i]);
    }
  }
  return found;
}

const TYPE_EXT: Record<string, string> = {
  "image/png": ".png",
  "image/jpeg": ".jpg",
  "image/gif": ".gif",
  "image/webp": ".webp",
  "image/avif": ".avif",
  "video/mp4": ".mp4",
  "video/webm": ".webm",
  "video/quicktime": ".mov",
  "audio/mpeg": ".mp3",
  "audio/wav": ".wav",
  "application/json": ".json",
};

/** The file's extension: the URL path's when it has a plain one, else the content type's, else none. */
export function extensionOf(sourceUrl: string, contentType: string | null): string {
  const path = new URL(sourceUrl).pathname;
  const m = /\.([A-Za-z0-9]{1,8})$/.exec(path);
  if (m) return `.${m[1]!.toLowerCase()}`;
  const type = (contentType ?? "").split(";")[0]!.trim().toLowerCase();
  return TYPE_EXT[type] ?? "";
}

/** `<prefix><task_id>/<n><ext>` (docs/contract.md, "Outputs"), n counting the output's URLs from 0 like `files[n]`. */
export function objectKey(prefix: string, taskId: string, n: number, ext: string): string {
  return `${prefix}${taskId}/${n}${ext}`;
}
