import { describe, expect, it, vi } from "vitest";
import { attemptVerdict } from "../../src/core/delivery.js";
import { mirrorsOutput } from "../../src/core/mirror-decision.js";
import { creationWakesSubmitter } from "../../src/core/nudges.js";
import { readinessProblems, STALLED_AFTER_MS } from "../../src/core/readiness.js";

/** The decisions relay.ts used to make inline, one test per branch (relay.ts only wires them). */
describe("mirrorsOutput", () => {
  const withFiles = JSON.stringify({ images: [{ url: "https://cdn.example.com/a.png" }] });

  it("an output without files mirrors nothing, and the client's bucket is not read", async () => {
    const bucket = vi.fn(async () => "sealed-config");
    expect(await mirrorsOutput(JSON.stringify({ text: "no files" }), bucket)).toBe(false);
    expect(await mirrorsOutput(null, bucket)).toBe(false);
    expect(bucket).not.toHaveBeenCalled();
  });

  it("files and no bucket (none set, or the client gone): no mirror", async () => {
    expect(await mirrorsOutput(withFiles, async () => null)).toBe(false);
    expect(await mirrorsOutput(withFiles, async () => undefined)).toBe(false);
  });

  it("files and a bucket: the task waits for its copies", async () => {
    expect(await mirrorsOutput(withFiles, async () => "sealed-config")).toBe(true);
  });

  it("a long output still held by the parse worker is fetched only for a client with a bucket", async () => {
    const held = (text: string) => {
      const pieces = [text.slice(0, 10), text.slice(10)];
      const read = vi.fn(async function* () {
        yield* pieces;
      });
      return { count: pieces.length, read, bytes: vi.fn() };
    };
    const noBucket = held(withFiles);
    expect(await mirrorsOutput(noBucket, async () => null)).toBe(false);
    expect(noBucket.read).not.toHaveBeenCalled();
    expect(await mirrorsOutput(held(withFiles), async () => "sealed-config")).toBe(true);
    expect(await mirrorsOutput(held(JSON.stringify({ text: "no files" })), async () => "sealed-config")).toBe(false);
  });
});

describe("creationWakesSubmitter", () => {
  it("a task with a deadline wakes it, without asking whether the account is full", () => {
    const full = vi.fn(() => true);
    expect(creationWakesSubmitter(1_000, full)).toBe(true);
    expect(full).not.toHaveBeenCalled();
  });

  it("without a deadline: only when the account has room", () => {
    expect(creationWakesSubmitter(null, () => false)).toBe(true);
    expect(creationWakesSubmitter(null, () => true)).toBe(false);
  });
});

describe("readinessProblems", () => {
  const NOW = 1_000_000;
  const beat = (name: string, isRunning = true, lastBeatAt = NOW) => ({ name, isRunning, lastBeatAt });

  it("nothing wrong: ready", () => {
    expect(readinessProblems(null, null, [beat("submitter"), beat("pruner")], NOW)).toEqual([]);
  });

  it("a failed probe is reported, and a recent failure only without one", () => {
    expect(readinessProblems("disk full", "storage writes failed 3 s ago", [], NOW)).toEqual(["disk full"]);
    expect(readinessProblems(null, "storage writes failed 3 s ago", [], NOW)).toEqual([
      "storage writes failed 3 s ago",
    ]);
  });

  it("a loop not running, or silent past the stall bound, is named; the pruner and the catalog may sleep longer", () => {
    const silent = NOW - STALLED_AFTER_MS - 1_000;
    expect(
      readinessProblems(
        null,
        null,
        [
          beat("submitter", false),
          beat("poller", true, silent),
          beat("dispatcher", true, NOW - STALLED_AFTER_MS),
          beat("pruner", true, silent),
          beat("catalog", true, silent),
          beat("mirror", false, silent),
        ],
        NOW,
      ),
    ).toEqual(["worker submitter not running", "worker poller stalled for 121 s", "worker mirror not running"]);
  });
});

describe("attemptVerdict", () => {
  it("a 2xx succeeded, a refusal before sending is blocked, anything else failed", () => {
    expect(attemptVerdict({ ok: true, blocked: false })).toBe("succeeded");
    expect(attemptVerdict({ ok: false, blocked: true })).toBe("blocked");
    expect(attemptVerdict({ ok: false, blocked: false })).toBe("failed");
  });
});
