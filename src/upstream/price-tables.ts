/**
 * The published price tables (docs/upstream.md, "Charging": the discounted price, what the account is charged).
 * Data only: the relay's price estimates (core/pricing.ts) and the simulator both read them.
 */

/** Model P: credits per image by quality and size. */
export const P_IMAGE_PRICES: Readonly<Record<string, Readonly<Record<string, number>>>> = {
  low: { "1K": 20, "2K": 30, "4K": 50 },
  medium: { "1K": 40, "2K": 70, "4K": 120 },
  high: { "1K": 140, "2K": 270, "4K": 450 },
  xhigh: { "1K": 240, "2K": 480, "4K": 800 },
  max: { "1K": 530, "2K": 1080, "4K": 1780 },
  auto: { "1K": 530, "2K": 1080, "4K": 1780 },
};

/** Model V: credits per default 5-second base-generation task by resolution. */
export const V_VIDEO_5S_PRICES: Readonly<Record<string, number>> = { "480p": 500, "720p": 750 };
