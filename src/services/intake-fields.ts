import type { FieldProblem } from "./errors.js";
import { fieldCountProblem, REQUEST_BOUNDS } from "./request-bounds.js";

/**
 * The body fields intake knows, per endpoint (docs/contract.md, "Intake"): the upstream's
 * documented fields plus the relay's own. The request schemas (src/http/schemas.ts) are keyed by
 * these lists, so the compiler holds them together, and /openapi.json lists exactly these. A field outside them is either a near miss of one (refused with the field meant)
 * or a model parameter, passed through only where the model's catalog entry names it.
 */
export const RELAY_BODY_FIELDS = [
  "callback_url",
  "callback_events",
  "callback_headers",
  "metadata",
  "expires_after_seconds",
] as const;
export const IMAGE_BODY_FIELDS = [
  "model",
  "mode",
  "prompt",
  "count",
  "image_urls",
  "aspect_ratio",
  "size",
  "resolution",
  "quality",
  ...RELAY_BODY_FIELDS,
] as const;
export const VIDEO_BODY_FIELDS = [
  "model",
  "video_mode",
  "prompt",
  "image_urls",
  "source_video_url",
  "duration",
  "resolution",
  "ratio",
  "aspect_ratio",
  ...RELAY_BODY_FIELDS,
] as const;

export function knownFields(type: "image" | "video"): readonly string[] {
  return type === "image" ? IMAGE_BODY_FIELDS : VIDEO_BODY_FIELDS;
}

/** Work done by near-miss suggestions: cells of the distance tables computed (tests hold it bounded). */
export interface NearMissWork {
  cells: number;
}

/**
 * A name longer than this is no near miss of any known field: the longest is 21 characters and at
 * most two edits are allowed. Checked before the name is even normalised, so each name costs O(1).
 */
const MAX_NEAR_MISS_NAME = 32;

/**
 * Optimal string alignment distance (Levenshtein plus adjacent transpositions) when it is at most
 * `max`, else null; only the band of cells within `max` of the diagonal is computed, and the walk
 * stops at a row whose every cell is over `max`. At most (2·max+1)·|a| cells.
 */
function distanceWithin(a: string, b: string, max: number, work?: NearMissWork): number | null {
  if (Math.abs(a.length - b.length) > max) return null;
  const FAR = max + 1;
  // Three rows (the transposition looks two back), reused: no allocation per row.
  let prev2 = new Int32Array(b.length + 1);
  let prev = new Int32Array(b.length + 1).map((_, j) => (j <= max ? j : FAR));
  let row = new Int32Array(b.length + 1);
  for (let i = 1; i <= a.length; i++) {
    row.fill(FAR);
    if (i <= max) row[0] = i;
    let best = row[0]!;
    const from = Math.max(1, i - max);
    const to = Math.min(b.length, i + max);
    for (let j = from; j <= to; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, prev2[j - 2]! + 1);
      row[j] = Math.min(v, FAR);
      best = Math.min(best, row[j]!);
    }
    if (work) work.cells += to - from + 1;
    if (best > max) return null;
    [prev2, prev, row] = [prev, row, prev2];
  }
  return prev[b.length]! <= max ? prev[b.length]! : null;
}

/** `callbackUrl`, `Callback-URL` and `callback_url` are one spelling. */
const normalized = (name: string) =>
  name
    .replace(/([a-z0-9])([A-Z])/g, "$1_$2")
    .toLowerCase()
    .replace(/[-\s.]/g, "_");

/**
 * Other names a field goes by: the other endpoint's (`mode` on a video request means `video_mode`)
 * and what other webhook APIs call the relay's callback fields (`webhook_url`, `notify_url`), which
 * no edit distance would find.
 */
const ALIASES: Record<string, string> = {
  mode: "video_mode",
  video_mode: "mode",
  ratio: "aspect_ratio",
  webhook_url: "callback_url",
  webhook: "callback_url",
  webhook_uri: "callback_url",
  notify_url: "callback_url",
  notification_url: "callback_url",
  callback: "callback_url",
  callback_uri: "callback_url",
  hook_url: "callback_url",
  webhook_events: "callback_events",
  events: "callback_events",
  webhook_headers: "callback_headers",
  headers: "callback_headers",
};

/**
 * The known field `name` was most likely meant as, or null when it is no near miss: the same name
 * in another case or separator style, or one or two edits away (one for names of up to five
 * characters, so `size` and `seed` stay apart). Bounded work per name whatever it is (a long name
 * is no near miss; distances are computed within their band only), so a body's cost is O(fields).
 */
export function meantField(name: string, known: readonly string[], work?: NearMissWork): string | null {
  if (name.length > MAX_NEAR_MISS_NAME || known.includes(name)) return null;
  const n = normalized(name);
  const alias = ALIASES[n];
  if (alias && known.includes(alias)) return alias;
  let best: { field: string; distance: number } | null = null;
  for (const field of known) {
    if (n === field) return field;
    const allowed = Math.min(n.length, field.length) <= 5 ? 1 : 2;
    const distance = distanceWithin(n, field, allowed, work);
    if (distance !== null && (!best || distance < best.distance)) best = { field, distance };
  }
  return best?.field ?? null;
}

/** Fields of the body intake does not know (neither the upstream's documented ones nor the relay's). */
export function unknownFields(type: "image" | "video", body: Record<string, unknown>): string[] {
  const known = knownFields(type);
  return Object.keys(body).filter((k) => !known.includes(k));
}

/**
 * One problem per near-miss field, naming the field meant: only the first
 * REQUEST_BOUNDS.maxSuggestedFields unknown fields are looked at, and none of a body over the field
 * count (fieldCountProblem refuses it).
 */
export function nearMissProblems(
  type: "image" | "video",
  body: Record<string, unknown>,
  work?: NearMissWork,
): (FieldProblem & { did_you_mean: string })[] {
  if (fieldCountProblem(body)) return [];
  const known = knownFields(type);
  return unknownFields(type, body)
    .slice(0, REQUEST_BOUNDS.maxSuggestedFields)
    .flatMap((field) => {
      const meant = meantField(field, known, work);
      return meant
        ? [{ field, message: `is not a field of this request; did you mean "${meant}"?`, did_you_mean: meant }]
        : [];
    });
}

/**
 * A media URL's start: https and a host. JSON Schema's `format: uri` accepts `https://` with an
 * empty authority (RFC 3986 allows it) where the URL parser refuses it, so intake and the published
 * schema both hold a URL to this pattern as well as to being parsed (issue #39).
 */
export const MEDIA_URL_PATTERN = /^https:\/\/[^/?#\s]/;
