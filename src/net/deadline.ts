import { Transform, type TransformCallback } from "node:stream";

/**
 * Deadlines for calls to the outside world (docs/contract.md, "Deadlines everywhere"; why and
 * which values: docs/decisions/0009-deadlines.md): a total deadline that aborts the call when it
 * passes, and a minimum rate for a body that streams. Either ends the call with a DeadlineError,
 * which every caller treats as an ordinary retryable failure.
 *
 * Timers are looked up when used (never captured at import), so a test's fake timers drive them;
 * a component may also be given its own `Timers`.
 */

export interface Timers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
  now(): number;
}

export const systemTimers: Timers = {
  setTimeout: (fn, ms) => {
    const handle = setTimeout(fn, ms);
    // A deadline never keeps the process alive on its own: the call it guards does, while it lasts.
    handle.unref();
    return handle;
  },
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
  now: () => Date.now(),
};

/** At least `bytes` in every `windowMs` in which the side blamed is the one holding the transfer up. */
export interface MinRate {
  bytes: number;
  windowMs: number;
}

/** A passed deadline: `total` (the whole call took too long) or `rate` (its body moved too slowly). */
export class DeadlineError extends Error {
  readonly retryable = true;
  constructor(
    message: string,
    readonly kind: "total" | "rate",
  ) {
    super(message);
    this.name = "DeadlineError";
  }
}

/** The DeadlineError in an error's cause chain (or a signal's reason), if there is one. */
export function deadlineIn(err: unknown): DeadlineError | null {
  for (let e = err, depth = 0; e && depth < 8; e = (e as { cause?: unknown }).cause, depth++) {
    if (e instanceof DeadlineError) return e;
  }
  return null;
}

export interface Deadline {
  /** Aborts when the deadline passes (reason: a DeadlineError), when `abort` is called, or when the parent signal aborts (its reason). */
  readonly signal: AbortSignal;
  /** Milliseconds left, 0 once passed. */
  remaining(): number;
  /** Ends the call now, for a reason found along the way (a body below its rate, say). */
  abort(reason: unknown): void;
  /**
   * Makes the deadline `ms` from the call's start when that is sooner than it is (never later):
   * for a call whose size is learnt along the way (a download's Content-Length). The error then
   * names the new deadline and `why`.
   */
  tighten(ms: number, why: string): void;
  /** The call is over: stops the timer and lets go of the parent; the signal never aborts after this. */
  dispose(): void;
}

/**
 * A total deadline of `ms` for one call to `what` (named in the error). Like AbortSignal.timeout,
 * but driven by `timers` (fake timers in tests), linked to a parent signal, and disposable so a
 * finished call leaves no timer behind.
 */
export function startDeadline(ms: number, opts: { what: string; parent?: AbortSignal; timers?: Timers }): Deadline {
  if (!Number.isFinite(ms) || ms <= 0)
    throw new RangeError(`deadline for ${opts.what}: ${ms} is not a positive number of milliseconds`);
  const timers = opts.timers ?? systemTimers;
  const controller = new AbortController();
  const startedAt = timers.now();
  let endsAt = startedAt + ms;
  let disposed = false;
  const abort = (reason: unknown) => {
    if (disposed || controller.signal.aborted) return;
    controller.abort(reason);
    cleanup();
  };
  const onParent = () => abort(opts.parent!.reason);
  let handle = timers.setTimeout(
    () => abort(new DeadlineError(`${opts.what} took longer than its deadline of ${ms} ms`, "total")),
    ms,
  );
  const cleanup = () => {
    timers.clearTimeout(handle);
    opts.parent?.removeEventListener("abort", onParent);
  };
  if (opts.parent?.aborted) abort(opts.parent.reason);
  else opts.parent?.addEventListener("abort", onParent, { once: true });
  return {
    signal: controller.signal,
    remaining: () => (controller.signal.aborted ? 0 : Math.max(0, endsAt - timers.now())),
    abort,
    tighten: (total, why) => {
      if (disposed || controller.signal.aborted || !(total >= 0) || startedAt + total >= endsAt) return;
      endsAt = startedAt + total;
      timers.clearTimeout(handle);
      handle = timers.setTimeout(
        () => abort(new DeadlineError(`${opts.what} took longer than its deadline of ${total} ms (${why})`, "total")),
        Math.max(0, endsAt - timers.now()),
      );
    },
    dispose: () => {
      if (disposed) return;
      disposed = true;
      cleanup();
    },
  };
}

/**
 * Settles like `work`, or rejects with the signal's reason as soon as it aborts, for work that
 * ignores the signal itself (an injected fetch, a local computation); `onAbort` lets go of it.
 */
export function raceSignal<T>(work: Promise<T>, signal: AbortSignal, onAbort?: () => void): Promise<T> {
  if (signal.aborted) {
    onAbort?.();
    work.catch(() => undefined);
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const abort = () => {
      onAbort?.();
      reject(signal.reason);
    };
    signal.addEventListener("abort", abort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener("abort", abort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener("abort", abort);
        reject(err);
      },
    );
  });
}

/**
 * Watches a transfer's progress: `add` the bytes as they move; every quarter window it asks
 * `blamed()` whether the side it watches is the one holding the transfer up now (a writer that
 * sends nothing while its reader waits, say). Once that side has held it up for a whole window in
 * which fewer than `rate.bytes` moved, `onSlow` is told, once. A check where the side is not to
 * blame starts a fresh window: a reader that pauses is no fault of its writer.
 */
export class RateWatch {
  private moved = 0;
  private since: number;
  private handle: unknown = null;
  private stopped = false;

  constructor(
    private readonly rate: MinRate,
    private readonly opts: {
      what: string;
      onSlow: (err: DeadlineError) => void;
      blamed?: () => boolean;
      timers?: Timers;
    },
  ) {
    if (!(rate.bytes > 0) || !(rate.windowMs > 0))
      throw new RangeError(`minimum rate for ${opts.what}: bytes and windowMs must be positive`);
    this.since = this.timers.now();
    this.arm();
  }

  private get timers(): Timers {
    return this.opts.timers ?? systemTimers;
  }

  add(bytes: number): void {
    this.moved += bytes;
  }

  stop(): void {
    this.stopped = true;
    if (this.handle !== null) this.timers.clearTimeout(this.handle);
    this.handle = null;
  }

  private arm(): void {
    this.handle = this.timers.setTimeout(() => this.check(), Math.max(1, Math.ceil(this.rate.windowMs / 4)));
  }

  private check(): void {
    this.handle = null;
    if (this.stopped) return;
    const now = this.timers.now();
    if (this.opts.blamed && !this.opts.blamed()) {
      this.restart(now);
    } else if (now - this.since >= this.rate.windowMs) {
      if (this.moved < this.rate.bytes) {
        this.stopped = true;
        this.opts.onSlow(
          new DeadlineError(
            `${this.opts.what} moved ${this.moved} bytes in ${now - this.since} ms, below the minimum of ${this.rate.bytes} bytes per ${this.rate.windowMs} ms`,
            "rate",
          ),
        );
        return;
      }
      this.restart(now);
    }
    this.arm();
  }

  private restart(now: number): void {
    this.since = now;
    this.moved = 0;
  }
}

/**
 * A pass-through stream for a body that must keep moving: it fails (destroys itself with a
 * DeadlineError) when the side it blames holds the body below `rate`, or when `signal` aborts
 * (with the signal's reason). `blame: "writer"` holds the sender to the rate while the reader has
 * room (a download, whoever reads it); `blame: "reader"` holds the reader to it while data waits
 * for it (an upload's receiver). `onSlow` hears of its own rate failure (not of errors that reach
 * it from elsewhere); `onClose` runs once, however the stream ends.
 */
export class RateGuard extends Transform {
  private readonly watch: RateWatch;
  private readonly signal: AbortSignal | undefined;
  private readonly onAbort = () =>
    this.destroy(
      this.signal!.reason instanceof Error
        ? this.signal!.reason
        : new DeadlineError(String(this.signal!.reason), "total"),
    );

  constructor(
    rate: MinRate,
    opts: {
      what: string;
      blame: "writer" | "reader";
      signal?: AbortSignal;
      timers?: Timers;
      onSlow?: (err: DeadlineError) => void;
      onClose?: () => void;
    },
  ) {
    super();
    this.watch = new RateWatch(rate, {
      what: opts.what,
      ...(opts.timers ? { timers: opts.timers } : {}),
      onSlow: (err) => {
        opts.onSlow?.(err);
        this.destroy(err);
      },
      blamed: () => (opts.blame === "writer" ? this.readerHasRoom() : this.dataWaits()),
    });
    this.signal = opts.signal;
    if (this.signal?.aborted) queueMicrotask(this.onAbort);
    else this.signal?.addEventListener("abort", this.onAbort, { once: true });
    this.once("close", () => {
      this.watch.stop();
      this.signal?.removeEventListener("abort", this.onAbort);
      opts.onClose?.();
    });
    // Once the writer is done and the reader has taken everything, nobody is to blame any more.
    this.once("end", () => this.watch.stop());
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    this.watch.add(chunk.length);
    done(null, chunk);
  }

  /** The writer is holding things up: it has not finished, and nothing waits for the reader. */
  private readerHasRoom(): boolean {
    return !this.writableFinished && this.writableLength === 0 && this.readableLength < this.readableHighWaterMark;
  }

  /** The reader is holding things up: what the writer sent waits for it. */
  private dataWaits(): boolean {
    return this.readableLength > 0 || this.writableLength > 0;
  }
}

/**
 * A cancel signal for one call, as undici takes one (an object with `aborted`, `reason` and an
 * EventEmitter's `on`/`once`/`removeListener` for `abort`): a fraction of an AbortController's
 * cost, which matters on a path that makes one per attempt, and not an EventEmitter either (its
 * constructor and `once` wrapper cost more than the rest of it; docs/performance.md, delivery's
 * fourteenth round). Only `abort` is ever emitted, once; a listener hears it at most once. A
 * library that wants a real AbortSignal gets one from `signal`, made only when asked for.
 */
export class Cancel {
  aborted = false;
  reason: unknown = undefined;
  /** The listeners of `abort` (usually one: undici's), in the order added. */
  private listeners: Array<() => void> | null = null;
  private controller: AbortController | null = null;

  /** An AbortSignal that aborts with this (made on first use). */
  get signal(): AbortSignal {
    if (this.controller === null) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  /** Adds a listener of `abort` (the only event); it runs at most once, as the call is cancelled. */
  on(event: "abort", listener: () => void): this {
    if (event === "abort" && !this.aborted) (this.listeners ??= []).push(listener);
    return this;
  }

  once(event: "abort", listener: () => void): this {
    return this.on(event, listener);
  }

  addListener(event: "abort", listener: () => void): this {
    return this.on(event, listener);
  }

  removeListener(event: "abort", listener: () => void): this {
    const at = event === "abort" && this.listeners ? this.listeners.lastIndexOf(listener) : -1;
    if (at >= 0) this.listeners!.splice(at, 1);
    return this;
  }

  off(event: "abort", listener: () => void): this {
    return this.removeListener(event, listener);
  }

  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.controller?.abort(reason);
    const listeners = this.listeners;
    this.listeners = null;
    if (listeners) for (const listener of listeners) listener();
  }
}

/** One call's place on a DeadlineTimer: `cancel` when the call is over. */
export interface PendingDeadline {
  /** When it expires (the timers' clock, ms). */
  readonly at: number;
  cancel(): void;
}

class Pending implements PendingDeadline {
  constructor(
    readonly at: number,
    readonly expire: () => void,
    private readonly owner: Set<Pending>,
  ) {}

  cancel(): void {
    this.owner.delete(this);
  }
}

/**
 * The deadlines of many concurrent calls on ONE timer (a sender's, a broker client's), armed for the
 * earliest of them: starting and ending a call's deadline is a set insert and delete, not a timer and
 * an AbortController of its own (about 7 µs a call, most of the per-attempt cost around a send).
 * When the timer fires, every deadline passed by then expires, never one before its time, and the
 * timer is armed again for the earliest left; with none left, no timer runs. With one timeout for
 * all (the common case) each new deadline is later than the armed one, so the timer is left alone.
 */
export class DeadlineTimer {
  private readonly pending = new Set<Pending>();
  private handle: unknown = null;
  private armedFor = Number.POSITIVE_INFINITY;

  constructor(private readonly timers: Timers = systemTimers) {}

  /** Deadlines not yet passed nor cancelled. */
  get size(): number {
    return this.pending.size;
  }

  /** `expire` runs once `ms` have passed, unless the deadline is cancelled first. */
  start(ms: number, expire: () => void): PendingDeadline {
    const entry = new Pending(this.timers.now() + Math.max(0, ms), expire, this.pending);
    this.pending.add(entry);
    if (entry.at < this.armedFor) this.arm(entry.at);
    return entry;
  }

  /**
   * Starts `work` under a deadline of `ms`: settles like it, or rejects with `expired()` once `ms`
   * have passed (aborting `cancel` with it first, so the call lets go of what it holds). Work that
   * fails at or past its deadline failed of it (a library's own timeout of the same length, say),
   * so that too is `expired()`. Work that ends after its deadline is ignored.
   */
  race<T>(ms: number, expired: () => Error, cancel: Cancel | null, work: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const expire = () => {
        const err = expired();
        cancel?.abort(err);
        reject(err);
      };
      const deadline = this.start(ms, expire);
      work().then(
        (value) => {
          deadline.cancel();
          resolve(value);
        },
        (err: unknown) => {
          deadline.cancel();
          if (this.timers.now() >= deadline.at) expire();
          else reject(err);
        },
      );
    });
  }

  private arm(at: number): void {
    if (this.handle !== null) this.timers.clearTimeout(this.handle);
    this.armedFor = at;
    this.handle = this.timers.setTimeout(() => this.fire(), Math.max(0, at - this.timers.now()));
  }

  private fire(): void {
    this.handle = null;
    this.armedFor = Number.POSITIVE_INFINITY;
    const now = this.timers.now();
    const due: Pending[] = [];
    let next = Number.POSITIVE_INFINITY;
    for (const entry of this.pending) {
      if (entry.at <= now) due.push(entry);
      else if (entry.at < next) next = entry.at;
    }
    for (const entry of due) this.pending.delete(entry);
    if (next < this.armedFor) this.arm(next);
    for (const entry of due) entry.expire();
  }
}
