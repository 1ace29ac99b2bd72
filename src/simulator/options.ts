import type { Clock } from "../clock.js";

export interface SimulatorAccountOptions {
  apiKey: string;
  /** Credits; default 1_000_000. */
  balance?: number;
  /** Running (non-terminal) tasks allowed at once; default 10. */
  maxConcurrent?: number;
  /** Task reads allowed in any 60-second window; default 120 (the documented limit); 0 = unlimited. */
  readsPerMinute?: number;
}

export interface SimulatorTimings {
  imageQueuedMs: number;
  imageProcessingMs: number;
  videoQueuedMs: number;
  videoProcessingMs: number;
}

/**
 * Spread in the simulated tasks, off by default (every task of a type then takes exactly its
 * timings and only the fail marker fails it). Draws come from a seeded generator, so a seed gives
 * the same sequence of durations and outcomes in creation order.
 */
export interface SimulatorVariation {
  /** Image processing time drawn uniformly from [imageProcessingMs, this]; unset: exactly imageProcessingMs. */
  imageProcessingMaxMs?: number;
  /** Video processing time drawn uniformly from [videoProcessingMs, this]; unset: exactly videoProcessingMs. */
  videoProcessingMaxMs?: number;
  /** Share of tasks (0 to 1) that end failed, refunded, without the fail marker; default 0. */
  failureRate?: number;
  /** Seed of the draws; default 1. */
  seed?: number;
}

export interface SimulatorOptions {
  clock?: Clock;
  /** Default: one account with key "sandbox". */
  accounts?: SimulatorAccountOptions[];
  timings?: Partial<SimulatorTimings>;
  variation?: SimulatorVariation;
  /** Origin used in Location headers and output URLs; default "http://simulator.local". */
  publicBaseUrl?: string;
}

export const DEFAULT_TIMINGS: SimulatorTimings = {
  imageQueuedMs: 1_000,
  imageProcessingMs: 3_000,
  videoQueuedMs: 2_000,
  videoProcessingMs: 10_000,
};

export const DEFAULT_ACCOUNT = {
  balance: 1_000_000,
  maxConcurrent: 10,
  readsPerMinute: 120,
} as const;

export const DEFAULT_PUBLIC_BASE_URL = "http://simulator.local";
