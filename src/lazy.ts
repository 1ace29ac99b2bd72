/**
 * A module (or anything built from one) loaded on first use and kept. The relay's start loads only
 * what every relay uses: the S3 SDK waits for a bucket, the queue clients for a queue endpoint, the
 * PostgreSQL driver for a DATABASE_URL (docs/architecture.md, "Loaded when configured"). Each of
 * them costs a fraction of a second of CPU to load, paid by every start that never needs it.
 * A failed load is not kept: the next use tries again.
 */
export interface Lazy<T> {
  /** The value, loaded by this call or an earlier one. */
  get(): Promise<T>;
  /** The value if a load has finished, else undefined (nothing is loaded): for a close that must not load. */
  peek(): T | undefined;
  /**
   * The value once a load under way has finished (undefined when none was started, or it failed),
   * starting none: for a close that must also reach a value whose load was still running.
   */
  loaded(): Promise<T | undefined>;
}

export function lazy<T>(load: () => Promise<T>): Lazy<T> {
  let pending: Promise<T> | null = null;
  let value: { v: T } | null = null;
  return {
    get() {
      if (value) return Promise.resolve(value.v);
      pending ??= load().then(
        (v) => {
          value = { v };
          return v;
        },
        (err: unknown) => {
          pending = null;
          throw err;
        },
      );
      return pending;
    },
    peek: () => value?.v,
    loaded: () => (pending ?? Promise.resolve(undefined)).catch(() => undefined),
  };
}
