/**
 * Media previews of a task's output. The output is the upstream's JSON, kept verbatim and read
 * tolerantly (its keys are "not shown" in the upstream reference), so previews are every https URL
 * found anywhere in it. Only https: a preview is loaded by the viewer's browser, and the page's CSP
 * allows exactly these origins for img-src/media-src, nothing else outside the relay.
 */

import { FairPool } from "../../core/fair-pool.js";
import { outputUrls } from "../../mirror/output-urls.js";
import { OFFLOAD_MIN_CHARS } from "../../upstream/json-offload.js";

/**
 * A stored output longer than this (UTF-16 units) is shown on the task page as text, never parsed
 * there (issue #38 item 7): its previews and links come from a scan of the text, and the page shows
 * its first SHOWN_OUTPUT_CHARS. Below it the page parses and pretty-prints as before.
 */
export const PARSED_OUTPUT_CHARS = OFFLOAD_MIN_CHARS;
export const SHOWN_OUTPUT_CHARS = 64 * 1024;

/** A task's output as the task page shows it: parsed when small, else its text's start and its URLs. */
export type ShownOutput =
  | { kind: "none" }
  | { kind: "parsed"; value: unknown }
  | { kind: "text"; start: string; chars: number; urls: string[] };

export function shownOutput(outputJson: string | null): ShownOutput {
  if (outputJson === null) return { kind: "none" };
  if (outputJson.length <= PARSED_OUTPUT_CHARS) {
    try {
      return { kind: "parsed", value: JSON.parse(outputJson) };
    } catch {
      return { kind: "parsed", value: outputJson };
    }
  }
  let start = outputJson.slice(0, SHOWN_OUTPUT_CHARS);
  // Never end the shown part on half a surrogate pair.
  if (/[\uD800-\uDBFF]$/.test(start)) start = start.slice(0, -1);
  return { kind: "text", start, chars: outputJson.length, urls: outputUrls(outputJson) };
}

/** Previews of a shown output: from its parsed value's walk, or from the URLs its text holds. */
export function previewsOf(output: ShownOutput): Preview[] {
  if (output.kind === "none") return [];
  if (output.kind === "parsed") return findPreviews(output.value);
  const found: Preview[] = [];
  const seen = new Set<string>();
  for (const url of output.urls) {
    const preview = asPreview(url, "");
    if (preview && !seen.has(preview.url) && found.length < MAX_PREVIEWS) {
      seen.add(preview.url);
      found.push(preview);
    }
  }
  return found;
}

/**
 * Previews of copies read from clients' buckets at once (docs/decisions/0008-fair-pool.md): a
 * FairPool, so a client whose bucket hangs holds at most its share (each read holds a socket to the
 * bucket and one to the viewer) and another client's preview is still served.
 */
export const PREVIEW_SLOTS = 32;
/** How long a preview waits for a slot before it is refused (429 concurrent_limit). */
export const PREVIEW_WAIT_MS = 2_000;
/** Previews one client may have waiting for a slot; past them, a preview is refused at once. */
const PREVIEW_WAITING_PER_CLIENT = 16;

/** The dashboard's pool of preview reads. */
export function previewSlots(): FairPool {
  return new FairPool({ size: PREVIEW_SLOTS, maxWaitingPerClient: PREVIEW_WAITING_PER_CLIENT });
}

export interface Preview {
  url: string;
  kind: "image" | "video";
  origin: string;
}

const VIDEO_EXT = /\.(mp4|webm|mov|m4v|ogv)(\?|#|$)/i;
const IMAGE_EXT = /\.(png|jpe?g|gif|webp|avif|bmp)(\?|#|$)/i;
/** An origin safe to place in a CSP header: https, a plain host name or IPv4, an optional port. */
const SAFE_ORIGIN = /^https:\/\/[a-z0-9.-]+(:\d{1,5})?$/;
const MAX_PREVIEWS = 12;

export function findPreviews(output: unknown): Preview[] {
  const found: Preview[] = [];
  const seen = new Set<string>();
  // Iterative walk with a visit cap: the output is an outside party's JSON.
  const stack: Array<{ value: unknown; key: string }> = [{ value: output, key: "" }];
  let visited = 0;
  while (stack.length > 0 && found.length < MAX_PREVIEWS && visited++ < 10_000) {
    const { value, key } = stack.pop()!;
    if (typeof value === "string") {
      const preview = asPreview(value, key);
      if (preview && !seen.has(preview.url)) {
        seen.add(preview.url);
        found.push(preview);
      }
    } else if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) stack.push({ value: value[i], key });
    } else if (value !== null && typeof value === "object") {
      const entries = Object.entries(value as Record<string, unknown>);
      for (let i = entries.length - 1; i >= 0; i--)
        stack.push({ value: entries[i]![1], key: `${key}.${entries[i]![0]}` });
    }
  }
  return found;
}

function asPreview(value: string, key: string): Preview | null {
  if (!value.startsWith("https://") || value.length > 4096) return null;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return null;
  }
  if (!SAFE_ORIGIN.test(url.origin) || url.username || url.password) return null;
  // The extension decides; without one, the JSON path does ("video.url" is a video).
  const kind = VIDEO_EXT.test(url.pathname)
    ? "video"
    : IMAGE_EXT.test(url.pathname)
      ? "image"
      : /video/i.test(key)
        ? "video"
        : "image";
  return { url: url.href, kind, origin: url.origin };
}

/** http/https links only: a `javascript:` URL in an outside party's JSON must never become a link. */
export function isWebUrl(value: string): boolean {
  return /^https?:\/\//i.test(value);
}
