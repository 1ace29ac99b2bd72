import { and, eq } from "drizzle-orm";
import type { Clock } from "../clock.js";
import type { Db } from "../db/open.js";
import { durationStats } from "../db/schema.js";

const MAX_SAMPLES = 50;

/**
 * How long tasks of a type and model take from submission to end, learned from finished tasks:
 * the median of the most recent samples, kept in SQLite so a restart keeps what was learned.
 */
export class DurationStats {
  private readonly cache = new Map<string, number[]>();

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
  ) {}

  private samples(type: string, model: string): number[] {
    const key = `${type}\u0000${model}`;
    let samples = this.cache.get(key);
    if (!samples) {
      const row = this.db.select().from(durationStats).where(and(eq(durationStats.type, type), eq(durationStats.model, model))).get();
      samples = row ? (JSON.parse(row.samplesJson) as number[]) : [];
      this.cache.set(key, samples);
    }
    return samples;
  }

  record(type: string, model: string, durationMs: number): void {
    const samples = this.samples(type, model);
    samples.push(Math.max(0, Math.round(durationMs)));
    if (samples.length > MAX_SAMPLES) samples.splice(0, samples.length - MAX_SAMPLES);
    const now = this.clock.now();
    this.db
      .insert(durationStats)
      .values({ type, model, samplesJson: JSON.stringify(samples), updatedAt: now })
      .onConflictDoUpdate({ target: [durationStats.type, durationStats.model], set: { samplesJson: JSON.stringify(samples), updatedAt: now } })
      .run();
  }

  /** Median duration, or null until a few tasks have finished. */
  expected(type: string, model: string): number | null {
    return this.quantile(type, model, 0.5);
  }

  quantile(type: string, model: string, q: number): number | null {
    const samples = this.samples(type, model);
    if (samples.length < 3) return null;
    const sorted = [...samples].sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  }
}
