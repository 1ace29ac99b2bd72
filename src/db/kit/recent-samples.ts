/**
 * How long a model's duration samples, once read, answer the creations that follow without another
 * read. The samples are written behind (DURATION_SAVE_EVERY_MS, workers/duration-stats.ts), so
 * another instance's are already up to that old; this store's own writes drop its copy.
 */
export const SAMPLES_FRESH_MS = 1_000;

/**
 * Each model's last read of its samples' text (one in flight is shared), on both drivers: every
 * creation's answer reads them for its estimate, a statement per creation for a figure that changes
 * every few seconds at most. `forget` after this store writes a model's samples.
 */
export function recentSamples(read: (type: string, model: string) => Promise<string | null>): {
  text(type: string, model: string): Promise<string | null>;
  forget(type: string, model: string): void;
} {
  const recent = new Map<string, { at: number; text: Promise<string | null> }>();
  return {
    text: (type, model) => {
      const key = `${type}\u0000${model}`;
      const now = performance.now();
      const last = recent.get(key);
      if (last && now - last.at < SAMPLES_FRESH_MS) return last.text;
      const entry = { at: now, text: read(type, model) };
      recent.set(key, entry);
      entry.text.catch(() => {
        if (recent.get(key) === entry) recent.delete(key);
      });
      return entry.text;
    },
    // After the write: a read that began before it may hold the older samples.
    forget: (type, model) => {
      recent.delete(`${type}\u0000${model}`);
    },
  };
}
