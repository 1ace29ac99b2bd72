import type { Clock } from "../clock.js";
import type { Store } from "../store/store.js";

const MAX_SAMPLES = 50;

/**
 * How long tasks of a type and model take from submission to end, learned from finished tasks:
 * the median of the most recent samples, kept in the store so a restart keeps what was learned.
 */
export class DurationStats {
  private readonly cache = new Map<string, number[]>();

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
  ) {}

  private async samples(type: string, model: string): Promise<number[]> {
    const key = `${type}\u0000${model}`;
    let samples = this.cache.get(key);
    if (!samples) {
      const stored = await this.store.accounts.durationSamples(type, model);
      // Another caller may have loaded (and added to) them while this one waited.
      samples = this.cache.get(key) ?? stored;
      this.cache.set(key, samples);
    }
    return samples;
  }

  async record(type: string, model: string, durationMs: number): Promise<void> {
    const samples = await this.samples(type, model);
    samples.push(Math.max(0, Math.round(durationMs)));
    if (samples.length > MAX_SAMPLES) samples.splice(0, samples.length - MAX_SAMPLES);
    await this.store.accounts.saveDurationSamples(type, model, [...samples], this.clock.now());
  }

  /** Median duration, or null until a few tasks have finished. */
  expected(type: string, model: string): Promise<number | null> {
    return this.quantile(type, model, 0.5);
  }

  async quantile(type: string, model: string, q: number): Promise<number | null> {
    const samples = await this.samples(type, model);
    if (samples.length < 3) return null;
    const sorted = [...samples].sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  }
}
