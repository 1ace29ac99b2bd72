import type { PImageQuality } from "./catalog.js";
import { P_IMAGE_PRICES, V_VIDEO_5S_PRICES } from "../upstream/price-tables.js";

/** Flat rate for image models without a published table. */
export const DEFAULT_IMAGE_PRICE = 20;

/** Price of a default 5-second video by resolution; model V of docs/upstream.md, "Charging", plus a 1080p tier. */
const VIDEO_BASE_5S: Record<string, number> = { ...V_VIDEO_5S_PRICES, "1080p": 1000 };

export function imagePrice(model: string, quality: PImageQuality, size: string, count = 1): number {
  const perImage = model === "p-image" ? (P_IMAGE_PRICES[quality]?.[size] ?? DEFAULT_IMAGE_PRICE) : DEFAULT_IMAGE_PRICE;
  return perImage * count;
}

/** Linear in duration, rounded up to a multiple of 50 credits as docs/upstream.md, "Charging" states for video. */
export function videoPrice(resolution: string, durationSeconds: number): number {
  const base = VIDEO_BASE_5S[resolution] ?? VIDEO_BASE_5S["720p"]!;
  const raw = (base * durationSeconds) / 5;
  // Rounded to micro-credits first so float noise (e.g. 3150.0000000000005) cannot add 50.
  const steps = Math.ceil(Math.round((raw / 50) * 1e6) / 1e6);
  return steps * 50;
}
