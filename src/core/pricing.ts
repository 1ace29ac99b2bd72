import { canonicalJson, sha256Hex } from "../crypto.js";
import { P_IMAGE_PRICES, V_VIDEO_5S_PRICES } from "../upstream/price-tables.js";

/**
 * What a task will cost, before it is submitted: from the published price tables where they
 * apply (docs/upstream.md, "Charging", the discounted price), otherwise from what the upstream charged for an
 * earlier task with the same price key (learned_prices). Unknown is a valid answer: the credit
 * budget is then conservative (core of it in core/credits.ts).
 */

/** Fields that only change what is generated, never its price. */
const CONTENT_FIELDS = new Set(["prompt", "negative_prompt", "seed"]);

/**
 * The model and price-relevant parameters, as one key: two requests with the same key cost the
 * same. Everything that is not pure content counts (unknown fields included: conservative), media
 * lists count by length, a source video by presence.
 */
export function priceKey(type: "image" | "video", body: Record<string, unknown>): string {
  const relevant: Record<string, unknown> = {};
  for (const [field, value] of Object.entries(body)) {
    if (CONTENT_FIELDS.has(field) || value === undefined) continue;
    if (field === "image_urls") relevant[field] = Array.isArray(value) ? value.length : 0;
    else if (field === "source_video_url") relevant[field] = value ? 1 : 0;
    else relevant[field] = value;
  }
  return `${type}:${String(body.model)}:${digestOf(canonicalJson(relevant))}`;
}

/**
 * The key's digest by its canonical text, the last few hundred kept: requests of one client mostly
 * repeat their parameters, so a creation's price key costs a map read instead of a SHA-256 (issue #43).
 */
const digests = new Map<string, string>();
const DIGESTS_KEPT = 512;
/** Longer texts are hashed every time (not kept: the map stays small). */
const DIGEST_TEXT_KEPT = 1024;

function digestOf(text: string): string {
  let digest = digests.get(text);
  if (digest === undefined) {
    digest = sha256Hex(text).slice(0, 32);
    if (text.length <= DIGEST_TEXT_KEPT) {
      if (digests.size >= DIGESTS_KEPT) digests.delete(digests.keys().next().value!);
      digests.set(text, digest);
    }
  }
  return digest;
}

const IMAGE_FIELDS = new Set([
  "model",
  "mode",
  "prompt",
  "negative_prompt",
  "seed",
  "count",
  "image_urls",
  "aspect_ratio",
  "size",
  "quality",
]);
const VIDEO_FIELDS = new Set([
  "model",
  "video_mode",
  "prompt",
  "negative_prompt",
  "seed",
  "image_urls",
  "duration",
  "resolution",
  "ratio",
  "aspect_ratio",
]);

const onlyKnownFields = (body: Record<string, unknown>, known: Set<string>) =>
  Object.keys(body).every((f) => known.has(f));

/**
 * The published table's price, when the request is exactly one the table describes (every
 * price-relevant parameter given and listed; no field the table does not cover); else null.
 */
export function tablePrice(type: "image" | "video", body: Record<string, unknown>): number | null {
  if (type === "image" && body.model === "p-image" && onlyKnownFields(body, IMAGE_FIELDS)) {
    const row = typeof body.quality === "string" ? P_IMAGE_PRICES[body.quality] : undefined;
    const price = row && typeof body.size === "string" ? row[body.size] : undefined;
    return price !== undefined && (body.count === undefined || body.count === 1) ? price : null;
  }
  if (type === "video" && body.model === "v-video" && onlyKnownFields(body, VIDEO_FIELDS)) {
    const base = typeof body.resolution === "string" ? V_VIDEO_5S_PRICES[body.resolution] : undefined;
    const fiveSeconds = body.duration === undefined || body.duration === 5;
    const baseGeneration =
      body.video_mode === undefined || ["t2v", "i2v_first", "i2v_last"].includes(String(body.video_mode));
    return base !== undefined && fiveSeconds && baseGeneration ? base : null;
  }
  return null;
}
