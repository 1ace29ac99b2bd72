import { PassThrough, Readable, Writable } from "node:stream";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  Cancel,
  DeadlineError,
  DeadlineTimer,
  RateGuard,
  RateWatch,
  deadlineIn,
  raceSignal,
  startDeadline,
} from "../../src/net/deadline.js";

/** The deadline unit (docs/contract.md, "Deadlines everywhere"), on fake timers: nothing here waits for real time. */
beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe("startDeadline", () => {
  it("aborts at the deadline with a retryable DeadlineError naming the call, not a moment before", () => {
    const d = startDeadline(1_000, { what: "the bucket" });
    vi.advanceTimersByTime(999);
    expect(d.signal.aborted).toBe(false);
    expect(d.remaining()).toBe(1);
    vi.advanceTimersByTime(1);
    expect(d.signal.aborted).toBe(true);
    expect(d.remaining()).toBe(0);
    expect(d.signal.reason).toBeInstanceOf(DeadlineError);
    expect(d.signal.reason).toMatchObject({
      kind: "total",
      retryable: true,
      message: "the bucket took longer than its deadline of 1000 ms",
    });
  });

  it("never aborts once disposed, and leaves no timer behind", () => {
    const d = startDeadline(1_000, { what: "x" });
    expect(vi.getTimerCount()).toBe(1);
    d.dispose();
    expect(vi.getTimerCount()).toBe(0);
    vi.advanceTimersByTime(5_000);
    expect(d.signal.aborted).toBe(false);
  });

  it("follows its parent's abort with the parent's reason, and lets go of the parent when done", () => {
    const parent = new AbortController();
    const d = startDeadline(1_000, { what: "x", parent: parent.signal });
    const reason = new Error("lease lost");
    parent.abort(reason);
    expect(d.signal.reason).toBe(reason);
    expect(vi.getTimerCount()).toBe(0);

    const already = new AbortController();
    already.abort(reason);
    expect(startDeadline(1_000, { what: "x", parent: already.signal }).signal.reason).toBe(reason);

    const kept = new AbortController();
    const spy = vi.spyOn(kept.signal, "removeEventListener");
    startDeadline(1_000, { what: "x", parent: kept.signal }).dispose();
    expect(spy).toHaveBeenCalledWith("abort", expect.any(Function));
  });

  it("abort(reason) ends it early with that reason; the timer is cleared", () => {
    const d = startDeadline(1_000, { what: "x" });
    const slow = new DeadlineError("too slow", "rate");
    d.abort(slow);
    expect(d.signal.reason).toBe(slow);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("tighten brings the deadline forward, counted from the call's start, and never puts it back", () => {
    const d = startDeadline(60_000, { what: "the output URL" });
    vi.advanceTimersByTime(1_000);
    d.tighten(120_000, "ignored: later than the deadline");
    expect(d.remaining()).toBe(59_000);
    d.tighten(5_000, "100 bytes at 25 bytes/s");
    expect(d.remaining()).toBe(4_000);
    expect(vi.getTimerCount()).toBe(1);
    vi.advanceTimersByTime(3_999);
    expect(d.signal.aborted).toBe(false);
    vi.advanceTimersByTime(1);
    expect(d.signal.reason).toMatchObject({
      kind: "total",
      retryable: true,
      message: "the output URL took longer than its deadline of 5000 ms (100 bytes at 25 bytes/s)",
    });
    expect(vi.getTimerCount()).toBe(0);
  });

  it("tighten to a moment already past aborts at once; after dispose it does nothing", () => {
    const late = startDeadline(60_000, { what: "x" });
    vi.advanceTimersByTime(2_000);
    late.tighten(1_000, "why");
    vi.advanceTimersByTime(0);
    expect(late.signal.reason).toMatchObject({ message: "x took longer than its deadline of 1000 ms (why)" });
    const done = startDeadline(60_000, { what: "y" });
    done.dispose();
    done.tighten(1, "why");
    expect(vi.getTimerCount()).toBe(0);
  });

  it("refuses a deadline that is not a positive number", () => {
    expect(() => startDeadline(0, { what: "x" })).toThrow(RangeError);
    expect(() => startDeadline(Number.NaN, { what: "x" })).toThrow(RangeError);
  });

  it("uses injected timers when given them", () => {
    let now = 0;
    const pending: Array<{ at: number; fn: () => void }> = [];
    const timers = {
      now: () => now,
      setTimeout: (fn: () => void, ms: number) => pending.push({ at: now + ms, fn }),
      clearTimeout: () => {},
    };
    const d = startDeadline(50, { what: "x", timers });
    now = 40;
    expect(d.remaining()).toBe(10);
    now = 50;
    pending[0]!.fn();
    expect(d.signal.reason).toBeInstanceOf(DeadlineError);
  });
});

describe("deadlineIn and raceSignal", () => {
  it("finds a DeadlineError down a cause chain", () => {
    const d = new DeadlineError("late", "total");
    expect(deadlineIn(new Error("outer", { cause: new Error("mid", { cause: d }) }))).toBe(d);
    expect(deadlineIn(new Error("plain"))).toBeNull();
    expect(deadlineIn(undefined)).toBeNull();
  });

  it("raceSignal rejects with the signal's reason when work that cannot be aborted outlasts it", async () => {
    const d = startDeadline(100, { what: "presign" });
    const never = new Promise<string>(() => {});
    const raced = raceSignal(never, d.signal);
    vi.advanceTimersByTime(100);
    await expect(raced).rejects.toBeInstanceOf(DeadlineError);
    await expect(raceSignal(Promise.resolve(1), new AbortController().signal)).resolves.toBe(1);
  });
});

describe("RateWatch", () => {
  it("tells once when fewer than the minimum moved in a whole window", () => {
    const slow = vi.fn();
    const w = new RateWatch({ bytes: 100, windowMs: 1_000 }, { what: "the body", onSlow: slow });
    w.add(99);
    vi.advanceTimersByTime(999);
    expect(slow).not.toHaveBeenCalled();
    vi.advanceTimersByTime(1);
    expect(slow).toHaveBeenCalledOnce();
    expect(slow.mock.calls[0]![0]).toMatchObject({
      kind: "rate",
      message: "the body moved 99 bytes in 1000 ms, below the minimum of 100 bytes per 1000 ms",
    });
    vi.advanceTimersByTime(10_000);
    expect(slow).toHaveBeenCalledOnce();
    expect(vi.getTimerCount()).toBe(0);
  });

  it("a transfer at the minimum goes on for ever; each window counts afresh", () => {
    const slow = vi.fn();
    const w = new RateWatch({ bytes: 100, windowMs: 1_000 }, { what: "x", onSlow: slow });
    for (let i = 0; i < 20; i++) {
      w.add(100);
      vi.advanceTimersByTime(1_000);
    }
    expect(slow).not.toHaveBeenCalled();
    // Bytes of an earlier window do not pay for a silent one.
    w.add(10_000);
    vi.advanceTimersByTime(1_000);
    vi.advanceTimersByTime(1_000);
    expect(slow).toHaveBeenCalledOnce();
    w.stop();
  });

  it("a check where the side watched is not to blame starts a fresh window", () => {
    const slow = vi.fn();
    let blamed = false;
    const w = new RateWatch({ bytes: 100, windowMs: 1_000 }, { what: "x", onSlow: slow, blamed: () => blamed });
    vi.advanceTimersByTime(5_000);
    expect(slow).not.toHaveBeenCalled();
    blamed = true;
    vi.advanceTimersByTime(999);
    expect(slow).not.toHaveBeenCalled(); // the window began at the last check not to blame (5 000 ms)
    vi.advanceTimersByTime(1);
    expect(slow).toHaveBeenCalledOnce();
    w.stop();
  });

  it("stop leaves no timer", () => {
    const w = new RateWatch({ bytes: 1, windowMs: 1_000 }, { what: "x", onSlow: () => {} });
    w.stop();
    expect(vi.getTimerCount()).toBe(0);
  });
});

/** A reader that takes `chunk` bytes every `everyMs` (what a slow receiver of an upload does). */
function slowReader(everyMs: number): Writable & { received: number } {
  const w = new Writable({
    highWaterMark: 1,
    write(chunk: Buffer, _enc, done) {
      w.received += chunk.length;
      setTimeout(done, everyMs);
    },
  }) as Writable & { received: number };
  w.received = 0;
  return w;
}

describe("RateGuard", () => {
  it("blame writer: a body that drips while its reader waits fails within a window, and the stream is destroyed with the DeadlineError", async () => {
    const source = new PassThrough();
    const guard = new RateGuard({ bytes: 1_024, windowMs: 1_000 }, { what: "the output URL", blame: "writer" });
    source.pipe(guard);
    const failed = new Promise<unknown>((r) => guard.once("error", r));
    guard.resume();
    const drip = setInterval(() => source.write(Buffer.from([1])), 100);
    await vi.advanceTimersByTimeAsync(1_000);
    clearInterval(drip);
    const err = await failed;
    expect(err).toBeInstanceOf(DeadlineError);
    expect(err).toMatchObject({ kind: "rate" });
    expect((err as Error).message).toMatch(
      /^the output URL moved (9|10) bytes in 1000 ms, below the minimum of 1024 bytes per 1000 ms$/,
    );
    expect(guard.destroyed).toBe(true);
  });

  it("blame writer: a reader that stops reading is not the writer's fault", async () => {
    const guard = new RateGuard({ bytes: 1_024, windowMs: 1_000 }, { what: "x", blame: "writer" });
    const errors: unknown[] = [];
    guard.on("error", (e) => errors.push(e));
    // Fills the readable side past its high-water mark, and nobody reads.
    while (guard.write(Buffer.alloc(4_096))) {
      /* until backpressure */
    }
    await vi.advanceTimersByTimeAsync(10_000);
    expect(errors).toEqual([]);
    guard.destroy();
  });

  it("blame reader: a receiver that takes the upload below the rate fails it; one at the rate does not", async () => {
    const make = (everyMs: number) => {
      const guard = new RateGuard({ bytes: 8 * 1024, windowMs: 1_000 }, { what: "the bucket", blame: "reader" });
      const reader = slowReader(everyMs);
      const source = Readable.from(
        (function* () {
          for (let i = 0; i < 1_000; i++) yield Buffer.alloc(1_024);
        })(),
      );
      source.pipe(guard).pipe(reader);
      const errors: unknown[] = [];
      guard.on("error", (e) => errors.push(e));
      return { guard, reader, errors };
    };
    const slow = make(500); // ~2 KiB/s
    const fine = make(50); // ~20 KiB/s
    await vi.advanceTimersByTimeAsync(3_000);
    expect(slow.errors).toEqual([expect.objectContaining({ name: "DeadlineError", kind: "rate" })]);
    expect(fine.errors).toEqual([]);
    expect(fine.reader.received).toBeGreaterThan(40 * 1024);
    fine.guard.destroy();
  });

  it("blame reader: a writer that is slow is not the reader's fault", async () => {
    const source = new PassThrough();
    const guard = new RateGuard({ bytes: 1_024, windowMs: 1_000 }, { what: "x", blame: "reader" });
    const errors: unknown[] = [];
    guard.on("error", (e) => errors.push(e));
    source.pipe(guard).resume();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(errors).toEqual([]);
    guard.destroy();
  });

  it("a signal that aborts destroys it with the signal's reason; onClose runs once and no timer is left", async () => {
    const d = startDeadline(2_000, { what: "the preview" });
    const onClose = vi.fn();
    const guard = new RateGuard(
      { bytes: 1, windowMs: 60_000 },
      { what: "x", blame: "writer", signal: d.signal, onClose: () => (onClose(), d.dispose()) },
    );
    const failed = new Promise<unknown>((r) => guard.once("error", r));
    guard.resume();
    await vi.advanceTimersByTimeAsync(2_000);
    expect(await failed).toMatchObject({
      name: "DeadlineError",
      kind: "total",
      message: "the preview took longer than its deadline of 2000 ms",
    });
    await vi.advanceTimersByTimeAsync(0);
    expect(onClose).toHaveBeenCalledOnce();
    expect(vi.getTimerCount()).toBe(0);
  });

  it("a body that ends in time passes through whole, and stops being watched", async () => {
    const guard = new RateGuard({ bytes: 1_024, windowMs: 1_000 }, { what: "x", blame: "writer" });
    const chunks: Buffer[] = [];
    guard.on("data", (c: Buffer) => chunks.push(c));
    const ended = new Promise((r) => guard.once("end", r));
    guard.end(Buffer.from("hello"));
    await ended;
    expect(Buffer.concat(chunks).toString()).toBe("hello");
    await vi.advanceTimersByTimeAsync(0);
    expect(vi.getTimerCount()).toBe(0);
  });
});

describe("DeadlineTimer: many calls' deadlines on one timer", () => {
  const late = () => new DeadlineError("the call took longer than its deadline of 1000 ms", "total");

  it("expires each deadline at its time, not a moment before, on one timer however many are pending", () => {
    const timer = new DeadlineTimer();
    const expired: string[] = [];
    timer.start(1_000, () => expired.push("a"));
    vi.advanceTimersByTime(300);
    timer.start(1_000, () => expired.push("b"));
    timer.start(1_000, () => expired.push("c"));
    expect(vi.getTimerCount()).toBe(1);
    vi.advanceTimersByTime(699);
    expect(expired).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(expired).toEqual(["a"]);
    vi.advanceTimersByTime(299);
    expect(expired).toEqual(["a"]);
    vi.advanceTimersByTime(1);
    expect(expired).toEqual(["a", "b", "c"]);
    expect(timer.size).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("an earlier deadline started after a later one still expires at its own time", () => {
    const timer = new DeadlineTimer();
    const expired: string[] = [];
    timer.start(5_000, () => expired.push("long"));
    timer.start(1_000, () => expired.push("short"));
    vi.advanceTimersByTime(1_000);
    expect(expired).toEqual(["short"]);
    vi.advanceTimersByTime(4_000);
    expect(expired).toEqual(["short", "long"]);
  });

  it("a cancelled deadline never expires, and with none pending no timer is left armed once it fires", () => {
    const timer = new DeadlineTimer();
    const expired: string[] = [];
    timer.start(1_000, () => expired.push("a")).cancel();
    expect(timer.size).toBe(0);
    vi.advanceTimersByTime(5_000);
    expect(expired).toEqual([]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("race: settles like the work when it ends in time, and leaves nothing pending", async () => {
    const timer = new DeadlineTimer();
    await expect(timer.race(1_000, late, null, () => Promise.resolve("done"))).resolves.toBe("done");
    await expect(timer.race(1_000, late, null, () => Promise.reject(new Error("refused")))).rejects.toThrow("refused");
    expect(timer.size).toBe(0);
  });

  it("race: work that stalls rejects at the deadline with the error, and its Cancel (and AbortSignal) abort with it", async () => {
    const timer = new DeadlineTimer();
    const cancel = new Cancel();
    const heard: unknown[] = [];
    cancel.once("abort", () => heard.push(cancel.reason));
    const raced = timer.race(1_000, late, cancel, () => new Promise<never>(() => {}));
    const outcome = raced.then(
      () => "resolved",
      (err: unknown) => err,
    );
    vi.advanceTimersByTime(999);
    expect(cancel.aborted).toBe(false);
    vi.advanceTimersByTime(1);
    const err = await outcome;
    expect(err).toBeInstanceOf(DeadlineError);
    expect(err).toMatchObject({ kind: "total", message: "the call took longer than its deadline of 1000 ms" });
    expect(cancel.aborted).toBe(true);
    expect(heard).toEqual([err]);
    expect(cancel.signal.aborted).toBe(true);
    expect(cancel.signal.reason).toBe(err);
  });
});

describe("DeadlineTimer.race: a failure at the deadline is the deadline's", () => {
  it("work that fails of its own timeout at the same moment is reported as the deadline", async () => {
    const timer = new DeadlineTimer();
    const late = () => new DeadlineError("publishing took longer than its deadline of 1000 ms", "total");
    // A library's own timer of the same length, set after ours, may still fire first: the clock
    // reads the deadline, ours has not run yet.
    const raced = timer.race(1_000, late, null, () => {
      vi.setSystemTime(Date.now() + 1_000);
      return Promise.reject(new Error("timeout"));
    });
    await expect(raced).rejects.toThrow("publishing took longer than its deadline of 1000 ms");
    await expect(timer.race(1_000, late, null, () => Promise.reject(new Error("refused")))).rejects.toThrow("refused");
  });
});

describe("Cancel: the signal undici takes, without an EventEmitter", () => {
  it("runs each listener of abort once, never one removed before, and none added after", () => {
    const cancel = new Cancel();
    const heard: string[] = [];
    const a = () => heard.push("a");
    const b = () => heard.push("b");
    // As undici's addAbortListener uses it: once(), then removeListener() when the request ends.
    cancel.once("abort", a).on("abort", b);
    cancel.once("abort", a);
    cancel.removeListener("abort", a);
    cancel.abort(new Error("late"));
    cancel.abort(new Error("again"));
    cancel.on("abort", () => heard.push("after"));
    expect(heard).toEqual(["a", "b"]);
    expect(cancel.reason).toEqual(new Error("late"));
    expect(cancel.signal.aborted).toBe(true);
  });
});
