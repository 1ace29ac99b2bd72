/**
 * Settings of the standalone simulator (main.ts), parsed from an environment
 * object handed in, so this file never reads process.env itself.
 */
import { z } from "zod";
import type { SimulatorOptions } from "./options.js";

const int = (min: number, max: number) =>
  z
    .string()
    .regex(/^\d+$/u, { error: "must be a whole number" })
    .transform(Number)
    .pipe(
      z
        .number()
        .int()
        .min(min, { error: `must be at least ${min}` })
        .max(max, { error: `must be at most ${max}` }),
    );

const DAY_MS = 86_400_000;

const EnvSchema = z.object({
  SIM_PORT: int(0, 65535).default(8090),
  SIM_HOST: z.string().min(1).default("127.0.0.1"),
  SIM_API_KEYS: z
    .string()
    .transform((v) => v.split(",").map((k) => k.trim()))
    .refine((keys) => keys.every((k) => /^\S+$/u.test(k)), {
      error: "must be comma-separated keys without spaces or empty entries",
    })
    .default(["sandbox"]),
  SIM_READS_PER_MINUTE: int(0, 1_000_000).default(120),
  SIM_MAX_CONCURRENT: int(1, 100_000).default(10),
  SIM_BALANCE: int(0, Number.MAX_SAFE_INTEGER).default(1_000_000),
  SIM_IMAGE_QUEUED_MS: int(0, DAY_MS).optional(),
  SIM_IMAGE_PROCESSING_MS: int(0, DAY_MS).optional(),
  SIM_VIDEO_QUEUED_MS: int(0, DAY_MS).optional(),
  SIM_VIDEO_PROCESSING_MS: int(0, DAY_MS).optional(),
  // Variation (off by default): processing time drawn from [*_PROCESSING_MS, *_PROCESSING_MAX_MS],
  // a share of tasks failing at random, and the seed of those draws.
  SIM_IMAGE_PROCESSING_MAX_MS: int(0, DAY_MS).optional(),
  SIM_VIDEO_PROCESSING_MAX_MS: int(0, DAY_MS).optional(),
  SIM_FAILURE_RATE: z
    .string()
    .regex(/^(0(\.\d+)?|1(\.0+)?)$/u, { error: "must be a number from 0 to 1, such as 0.05" })
    .transform(Number)
    .optional(),
  SIM_SEED: int(0, 4_294_967_295).optional(),
});

export interface StandaloneSettings {
  port: number;
  host: string;
  options: SimulatorOptions;
}

/** Parsed settings, or one line naming each bad variable (the caller prints it and exits 2). */
export function parseSimulatorEnv(
  env: Record<string, string | undefined>,
): { ok: true; settings: StandaloneSettings } | { ok: false; error: string } {
  // An empty variable means "unset", as in src/config.ts.
  const cleaned = Object.fromEntries(Object.keys(EnvSchema.shape).map((k) => [k, env[k] === "" ? undefined : env[k]]));
  const result = EnvSchema.safeParse(cleaned);
  if (!result.success) {
    const problems = result.error.issues.map((issue) => {
      const name = String(issue.path[0] ?? "environment");
      // API keys are never echoed back, even wrong ones.
      const shown = name === "SIM_API_KEYS" ? "" : ` (got "${cleaned[name]}")`;
      return `invalid environment variable ${name}: ${issue.message}${shown}`;
    });
    return { ok: false, error: `genrelay simulator: ${problems.join("; ")}` };
  }
  const e = result.data;
  const timings = Object.fromEntries(
    Object.entries({
      imageQueuedMs: e.SIM_IMAGE_QUEUED_MS,
      imageProcessingMs: e.SIM_IMAGE_PROCESSING_MS,
      videoQueuedMs: e.SIM_VIDEO_QUEUED_MS,
      videoProcessingMs: e.SIM_VIDEO_PROCESSING_MS,
    }).filter(([, v]) => v !== undefined),
  );
  const variation = Object.fromEntries(
    Object.entries({
      imageProcessingMaxMs: e.SIM_IMAGE_PROCESSING_MAX_MS,
      videoProcessingMaxMs: e.SIM_VIDEO_PROCESSING_MAX_MS,
      failureRate: e.SIM_FAILURE_RATE,
      seed: e.SIM_SEED,
    }).filter(([, v]) => v !== undefined),
  );
  const uniqueKeys = [...new Set(e.SIM_API_KEYS)];
  return {
    ok: true,
    settings: {
      port: e.SIM_PORT,
      host: e.SIM_HOST,
      options: {
        accounts: uniqueKeys.map((apiKey) => ({
          apiKey,
          balance: e.SIM_BALANCE,
          maxConcurrent: e.SIM_MAX_CONCURRENT,
          readsPerMinute: e.SIM_READS_PER_MINUTE,
        })),
        timings,
        // Only when asked for, so the defaults stay exactly what they were.
        ...(Object.keys(variation).length > 0 ? { variation } : {}),
      },
    },
  };
}
