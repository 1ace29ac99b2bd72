import type { FieldProblem } from "./errors.js";

/**
 * The body fields intake knows, per endpoint (section 14): the upstream's documented fields plus
 * the relay's own. The request schemas (src/http/schemas.ts) list exactly these; a unit test holds
 * them together. A field outside them is either a near miss of one (refused with the field meant)
 * or a model parameter, passed through only where the model's catalog entry names it.
 */
export const RELAY_BODY_FIELDS = ["callback_url", "callback_events", "callback_headers", "metadata", "expires_after_seconds"] as const;
export const IMAGE_BODY_FIELDS = ["model", "mode", "prompt", "count", "image_urls", "aspect_ratio", "size", "resolution", "quality", ...RELAY_BODY_FIELDS] as const;
export const VIDEO_BODY_FIELDS = ["model", "video_mode", "prompt", "image_urls", "source_video_url", "duration", "resolution", "ratio", "aspect_ratio", ...RELAY_BODY_FIELDS] as const;

export function knownFields(type: "image" | "video"): readonly string[] {
  return type === "image" ? IMAGE_BODY_FIELDS : VIDEO_BODY_FIELDS;
}

/** Optimal string alignment distance (Levenshtein plus adjacent transpositions). */
function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

/** `callbackUrl`, `Callback-URL` and `callback_url` are one spelling. */
const normalized = (name: string) =>
  name
    .replace(/([a-z0-9])([A-Z])/g, "$1_$2")
    .toLowerCase()
    .replace(/[-\s.]/g, "_");

/**
 * The known field `name` was most likely meant as, or null when it is no near miss: the same name
 * in another case or separator style, or one or two edits away (one for names of up to five
 * characters, so `size` and `seed` stay apart).
 */
/** The other endpoint's name for a field (`mode` on a video request means `video_mode`). */
const CROSS: Record<string, string> = { mode: "video_mode", video_mode: "mode", ratio: "aspect_ratio" };

export function meantField(name: string, known: readonly string[]): string | null {
  if (known.includes(name) || name.length > 80) return null;
  const n = normalized(name);
  if (CROSS[n] && known.includes(CROSS[n])) return CROSS[n];
  let best: { field: string; distance: number } | null = null;
  for (const field of known) {
    if (n === field) return field;
    const distance = editDistance(n, field);
    const allowed = Math.min(n.length, field.length) <= 5 ? 1 : 2;
    if (distance <= allowed && (!best || distance < best.distance)) best = { field, distance };
  }
  return best?.field ?? null;
}

/** Fields of the body intake does not know (neither the upstream's documented ones nor the relay's). */
export function unknownFields(type: "image" | "video", body: Record<string, unknown>): string[] {
  const known = knownFields(type);
  return Object.keys(body).filter((k) => !known.includes(k));
}

/** One problem per near-miss field, naming the field meant. */
export function nearMissProblems(type: "image" | "video", body: Record<string, unknown>): (FieldProblem & { did_you_mean: string })[] {
  const known = knownFields(type);
  return unknownFields(type, body).flatMap((field) => {
    const meant = meantField(field, known);
    return meant ? [{ field, message: `is not a field of this request; did you mean "${meant}"?`, did_you_mean: meant }] : [];
  });
}
