import { describe, expect, it } from "vitest";
import { parseSimulatorEnv } from "../../src/simulator/config.js";
import { imagePrice, videoPrice } from "../../src/simulator/pricing.js";

describe("parseSimulatorEnv", () => {
  it("has the documented defaults", () => {
    expect(parseSimulatorEnv({})).toEqual({
      ok: true,
      settings: {
        port: 8090,
        host: "127.0.0.1",
        options: {
          accounts: [{ apiKey: "sandbox", balance: 1_000_000, maxConcurrent: 10, readsPerMinute: 120 }],
          timings: {},
        },
      },
    });
  });

  it("reads every variable", () => {
    const parsed = parseSimulatorEnv({
      SIM_PORT: "0",
      SIM_HOST: "0.0.0.0",
      SIM_API_KEYS: " a , b,a",
      SIM_READS_PER_MINUTE: "0",
      SIM_MAX_CONCURRENT: "3",
      SIM_BALANCE: "500",
      SIM_IMAGE_QUEUED_MS: "0",
      SIM_IMAGE_PROCESSING_MS: "10",
      SIM_VIDEO_QUEUED_MS: "20",
      SIM_VIDEO_PROCESSING_MS: "30",
    });
    expect(parsed).toEqual({
      ok: true,
      settings: {
        port: 0,
        host: "0.0.0.0",
        options: {
          accounts: ["a", "b"].map((apiKey) => ({ apiKey, balance: 500, maxConcurrent: 3, readsPerMinute: 0 })),
          timings: { imageQueuedMs: 0, imageProcessingMs: 10, videoQueuedMs: 20, videoProcessingMs: 30 },
        },
      },
    });
  });

  const bad: [Record<string, string>, RegExp][] = [
    [
      { SIM_PORT: "abc" },
      /^genrelay simulator: invalid environment variable SIM_PORT: must be a whole number \(got "abc"\)$/,
    ],
    [{ SIM_PORT: "70000" }, /SIM_PORT: must be at most 65535/],
    [{ SIM_READS_PER_MINUTE: "-1" }, /SIM_READS_PER_MINUTE/],
    [{ SIM_MAX_CONCURRENT: "0" }, /SIM_MAX_CONCURRENT: must be at least 1/],
    [{ SIM_BALANCE: "1e6" }, /SIM_BALANCE/],
    [{ SIM_VIDEO_PROCESSING_MS: "soon" }, /SIM_VIDEO_PROCESSING_MS/],
    [{ SIM_API_KEYS: "a,,b" }, /SIM_API_KEYS: must be comma-separated keys/],
  ];
  for (const [env, message] of bad) {
    it(`rejects ${JSON.stringify(env)} with one line naming the variable`, () => {
      const parsed = parseSimulatorEnv(env);
      expect(parsed.ok).toBe(false);
      if (parsed.ok) return;
      expect(parsed.error).toMatch(message);
      expect(parsed.error).not.toContain("\n");
    });
  }

  it("never echoes API keys", () => {
    const parsed = parseSimulatorEnv({ SIM_API_KEYS: "secret-key, other key" });
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) expect(parsed.error).not.toContain("secret-key");
  });
});

describe("pricing", () => {
  it("rounds video charges up to a multiple of 50", () => {
    expect(videoPrice("720p", 5)).toBe(750);
    expect(videoPrice("720p", 4.2)).toBe(650); // 630 → 650
    expect(videoPrice("480p", 2.6)).toBe(300); // 260 → 300
    expect(videoPrice("1080p", 5.1)).toBe(1050); // 1020 → 1050
    expect(videoPrice("720p", 7)).toBe(1050); // exact: no extra step from float noise
    expect(videoPrice("480p", 0.1)).toBe(50);
  });

  it("uses the discounted p-image table and a flat rate elsewhere", () => {
    expect(imagePrice("p-image", "medium", "1K")).toBe(40);
    expect(imagePrice("p-image", "xhigh", "4K")).toBe(800);
    expect(imagePrice("flux-lite", "max", "4K")).toBe(20);
  });
});
