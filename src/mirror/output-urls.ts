/**
 * Which files of a task's output are copied, and where they go. The output is the upstream's JSON,
 * kept verbatim and read tolerantly (its keys are "not shown" in the upstream reference): every
 * http(s) URL in it, in document order, each once.
 */

const MAX_URLS = 64;
const MAX_URL_LENGTH = 4096;

/** Values looked at before giving up: an outside party's JSON. */
const MAX_VALUES = 10_000;

/**
 * Every http(s) URL among the output's string values, in document order, each once: at most
 * MAX_URLS of them, from the first MAX_VALUES values. The text is scanned, not parsed: a 7 MB output
 * costs only the prefix that holds those values, on whichever thread asks (issue #38 item 7). The
 * column always holds JSON.stringify's text (upstream/json-text.ts), so the scan meets valid JSON.
 */
export function outputUrls(outputJson: string | null): string[] {
  return outputJson === null ? [] : scanUrls(outputJson).found;
}

/**
 * outputUrls of the text of `pieces` joined (a long output as stored, core/stored-output.ts),
 * joining only as many pieces as the scan needs: it stops at its limits, in the first piece or two
 * of a 7 MB output, so the whole text is not built on the event loop to read its start.
 */
export function outputUrlsOfPieces(pieces: readonly string[]): string[] {
  for (let n = 1; ; n *= 2) {
    const text = pieces.slice(0, n).join("");
    const scan = scanUrls(text);
    // Stopped by a limit before the end of what was joined: the rest could not change the answer.
    if (n >= pieces.length || (scan.limited && scan.read < text.length)) return scan.found;
  }
}

/** The scan: what it found, whether a limit stopped it, and how far it read (an index past what it looked at). */
function scanUrls(s: string): { found: string[]; limited: boolean; read: number } {
  const found: string[] = [];
  const seen = new Set<string>();
  let visited = 0;
  let read = 0;
  let i = 0;
  while (i < s.length) {
    if (found.length >= MAX_URLS) return { found, limited: true, read };
    const c = s.charCodeAt(i);
    if (c === QUOTE) {
      const end = stringEnd(s, i);
      // Only a prefix of pieces ends inside a string: nothing more can be read from it.
      if (end === -1) return { found, limited: false, read: s.length + 1 };
      let next = end;
      while (isSpace(s.charCodeAt(next))) next++;
      read = Math.max(read, next + 1);
      // A string followed by a colon is a key, not a value.
      if (s.charCodeAt(next) !== COLON) {
        if (visited++ >= MAX_VALUES) return { found, limited: true, read };
        const raw = s.slice(i, end);
        const value = raw.includes("\\") ? (JSON.parse(raw) as string) : raw.slice(1, -1);
        if (/^https?:\/\//i.test(value) && value.length <= MAX_URL_LENGTH && !seen.has(value) && URL.canParse(value)) {
          seen.add(value);
          found.push(value);
        }
      }
      i = end;
    } else if (c === BRACE || c === BRACKET || isScalarStart(c)) {
      if (visited++ >= MAX_VALUES) return { found, limited: true, read: Math.max(read, i + 1) };
      i++;
      if (c !== BRACE && c !== BRACKET) while (i < s.length && !isDelimiter(s.charCodeAt(i))) i++;
      read = Math.max(read, i + 1);
    } else i++;
  }
  return { found, limited: found.length >= MAX_URLS, read: Math.max(read, s.length) };
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const BRACE = 0x7b;
const BRACKET = 0x5b;

/** The index just after the string literal that opens at `start`; -1 when the text ends inside it. */
function stringEnd(s: string, start: number): number {
  let i = start + 1;
  while (i < s.length) {
    const c = s.charCodeAt(i);
    if (c === BACKSLASH) i += 2;
    else if (c === QUOTE) return i + 1;
    else i++;
  }
  return -1;
}

const isSpace = (c: number) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
/** A number, true, false or null starts here. */
const isScalarStart = (c: number) => c === 0x2d || (c >= 0x30 && c <= 0x39) || c === 0x74 || c === 0x66 || c === 0x6e;
const isDelimiter = (c: number) => c === 0x2c || c === 0x5d || c === 0x7d || isSpace(c);

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
