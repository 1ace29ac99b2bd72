import type { Clock } from "../clock.js";
import type { Store } from "../store/store.js";

const MAX_SAMPLES = 50;
/** A model's samples are written to the store at most this often (and on flush()). */
export const DURATION_SAVE_EVERY_MS = 5_000;

/**
 * How long tasks of a type and model take from submission to end, learned from finished tasks:
 * the median of the most recent samples, kept in the store so a restart keeps what was learned.
 *
 * Written behind, at most once per DURATION_SAVE_EVERY_MS per model, not once per finished task:
 * every completion of a model used to rewrite the model's one row (on PostgreSQL the top statement
 * per task, its row lock shared by every instance's completions of the model). A sample learned
 * since the last write waits for the model's next completion past the interval, or for flush() at
 * stop; a kill -9 loses at most that interval's samples, which only makes an estimate a little
 * older.
 */
export class DurationStats {
  private readonly cache = new Map<string, number[]>();
  /** When each model's samples were last written; a model in `dirty` has samples not written yet. */
  private readonly savedAt = new Map<string, number>();
  private readonly dirty = new Set<string>();

  constructor(
    private readonly store: Pick<Store, "accounts">,
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
    const key = `${type}\u0000${model}`;
    const now = this.clock.now();
    const last = this.savedAt.get(key);
    if (last !== undefined && now >= last && now - last < DURATION_SAVE_EVERY_MS) {
      this.dirty.add(key);
      return;
    }
    await this.save(key, now);
  }

  /** Writes every model's samples not written yet (the relay's stop). */
  async flush(): Promise<void> {
    const now = this.clock.now();
    for (const key of [...this.dirty]) await this.save(key, now);
  }

  private async save(key: string, now: number): Promise<void> {
    const samples = this.cache.get(key);
    if (!samples) return;
    const cut = key.indexOf("\u0000");
    const [type, model] = [key.slice(0, cut), key.slice(cut + 1)];
    this.savedAt.set(key, now);
    this.dirty.delete(key);
    await this.store.accounts.saveDurationSamples(type, model, [...samples], now);
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
