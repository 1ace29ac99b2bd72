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

export interface SimulatorOptions {
  clock?: Clock;
  /** Default: one account with key "sandbox". */
  accounts?: SimulatorAccountOptions[];
  timings?: Partial<SimulatorTimings>;
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
