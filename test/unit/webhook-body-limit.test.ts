import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { cutToJsonBytes, fitTaskData, jsonStringBytes, WEBHOOK_BODY_MAX_BYTES } from "../../src/core/body-limit.js";
import { STORED_ERROR_MESSAGE_BYTES } from "../../src/core/stored-text.js";
import { flatTask } from "../../src/core/task-view.js";
import { transitionRules } from "../../src/core/transition.js";
import type { TaskRow } from "../../src/store/rows.js";
import { planTransition } from "../../src/store/transition-plan.js";
import { webhookBodyProblems } from "../helpers/webhook-schema.js";

/**
 * Body size by the bytes sent (docs/contract.md, "Body size by the bytes sent"; issue #30 item 5): a task event's body is at most
 * 256 KiB of serialized UTF-8 whatever the task holds; what makes it larger is left out or cut with
 * a flag, and the body stays valid JSON of the event's published schema. The events are planned as
 * the stores plan them (planTransition: the rules' prepare, then the event).
 */
const NOW = Date.UTC(2026, 0, 1);
const EVENTS = JSON.stringify(["task.processing", "task.succeeded", "task.failed", "task.canceled"]);

function row(over: Partial<TaskRow> = {}): TaskRow {
  return {
    id: "task_01jf3y8k2m9q7r5t3v1w0x6z4a",
    clientId: "cli_1",
    type: "image",
    model: "p-image",
    status: "processing",
    phase: "submitted",
    requestJson: "{}",
    callbackUrl: "https://hooks.example.com/x",
    callbackEvents: EVENTS,
    metadataJson: null,
    idempotencyKey: "k",
    requestHash: "h",
    upstreamAccount: "default",
    upstreamIdempotencyKey: "genrelay-task_1",
    upstreamTaskId: "up_1",
    outputJson: null,
    pointsCharged: null,
    pointsRefunded: null,
    errorJson: null,
    pointsReserved: 0,
    priceKey: "",
    conflictSince: null,
    eventSequence: 1,
    submitAttempts: 1,
    pollCount: 0,
    nextRunAt: null,
    claimedUntil: null,
    claimToken: null,
    expiresAt: null,
    createdAt: NOW - 1000,
    updatedAt: NOW - 1000,
    submittedAt: NOW - 900,
    completedAt: null,
    callbackHeaders: null,
    filesJson: null,
    storedBytes: 0,
    traceparent: null,
    tracestate: null,
    outputRef: null,
    ...over,
  };
}

/** The body of the event a task's end writes, as the stores write it. */
function endEvent(
  before: TaskRow,
  patch: Partial<TaskRow>,
): { payload: string; body: { data: Record<string, unknown> } } {
  const plan = planTransition(
    transitionRules,
    before,
    { phase: "done", completedAt: NOW, updatedAt: NOW, ...patch },
    { now: NOW, token: null, firstAttemptDelayMs: 0 },
  );
  const payload = plan.event!.payload;
  return { payload, body: JSON.parse(payload) as { data: Record<string, unknown> } };
}

const bytes = (s: string) => Buffer.byteLength(s, "utf8");

function expectSendable(payload: string): void {
  expect(bytes(payload)).toBeLessThanOrEqual(WEBHOOK_BODY_MAX_BYTES);
  expect(webhookBodyProblems(payload)).toEqual([]);
}

const file = (i: number, pad = 0) => ({
  source_url: `https://cdn.upstream.example/${"s".repeat(pad)}/${i}.png`,
  url: `https://bucket.s3.example.com/genrelay/task_1/${i}.png?X-Amz-Signature=${"f".repeat(64)}&X-Amz-Credential=${"c".repeat(pad)}`,
  key: `genrelay/task_1/${i}.png`,
  bytes: 123_456,
  sha256: "e".repeat(64),
  content_type: "image/png",
});

describe("repro 5: webhooks whose body passes 256 KiB for reasons the output-size rule missed", () => {
  it("a 300,000-character upstream error message: stored cut to 16 KiB, flagged, and the webhook fits", () => {
    const message = "upstream exploded: ".padEnd(300_000, "x");
    const { payload, body } = endEvent(row(), {
      status: "failed",
      errorJson: JSON.stringify({ code: "upstream_error", message, request_id: "req_1" }),
    });
    expectSendable(payload);
    const error = body.data.error as { code: string; message: string; message_truncated?: boolean };
    expect(error.code).toBe("upstream_error");
    expect(error.message_truncated).toBe(true);
    expect(bytes(error.message)).toBe(STORED_ERROR_MESSAGE_BYTES);
    expect(message.startsWith(error.message)).toBe(true);
  });

  it("90,000 CJK characters of output (270,661 bytes, under 192 Ki characters): the output is omitted", () => {
    const output = JSON.stringify({ text: "漢".repeat(90_000) });
    expect(output.length).toBeLessThan(192 * 1024);
    expect(bytes(output)).toBeGreaterThan(WEBHOOK_BODY_MAX_BYTES);
    const { payload, body } = endEvent(row(), {
      status: "succeeded",
      outputJson: output,
      pointsCharged: 40,
      pointsRefunded: 0,
    });
    expectSendable(payload);
    expect(body.data).toMatchObject({ status: "succeeded", output: null, output_omitted: true });
  });

  it("64 copied files with long URLs: as many as fit are carried, the rest left out with files_truncated", () => {
    const files = Array.from({ length: 64 }, (_, i) => file(i, 3_000));
    const output = JSON.stringify({ images: files.map((f) => ({ url: f.source_url })) });
    const { payload, body } = endEvent(row({ phase: "mirroring" }), {
      status: "succeeded",
      outputJson: output,
      filesJson: JSON.stringify(files),
    });
    expectSendable(payload);
    const carried = body.data.files as Array<{ key: string }>;
    expect(body.data).toMatchObject({ output: null, output_omitted: true, files_truncated: true });
    expect(carried.length).toBeGreaterThan(20);
    expect(carried.length).toBeLessThan(64);
    expect(carried.map((f) => f.key)).toEqual(files.slice(0, carried.length).map((f) => f.key));
  });

  it("a task that fits is carried whole, without flags (the body is what flatTask gives)", () => {
    const output = JSON.stringify({ images: [{ url: "https://cdn.example.com/a.png" }] });
    const { body } = endEvent(row(), { status: "succeeded", outputJson: output, filesJson: JSON.stringify([file(0)]) });
    expect(body.data.output).toEqual(JSON.parse(output));
    for (const flag of ["output_omitted", "files_truncated"]) expect(body.data).not.toHaveProperty(flag);
    expect(body.data.error).toBeNull();
  });
});

describe("JSON bytes of text", () => {
  const text = fc.string({
    unit: fc.oneof(
      fc.constantFrom('"', "\\", "\n", "\u0001", "\u2028", "\uD800", "\uDC00"),
      fc.constantFrom("a", "é", "漢", "😀"),
      fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)),
    ),
    maxLength: 200,
  });

  it("jsonStringBytes is the UTF-8 length of JSON.stringify", () => {
    fc.assert(
      fc.property(text, (s) => {
        expect(jsonStringBytes(s)).toBe(bytes(JSON.stringify(s)));
      }),
    );
  });

  it("cutToJsonBytes is the longest prefix within the budget, never splitting a pair", () => {
    fc.assert(
      fc.property(text, fc.nat(300), (s, budget) => {
        const cut = cutToJsonBytes(s, budget);
        expect(s.startsWith(cut)).toBe(true);
        expect(jsonStringBytes(cut)).toBeLessThanOrEqual(Math.max(2, budget));
        if (cut.length < s.length) {
          const next = s.slice(
            0,
            cut.length +
              (/[\uD800-\uDBFF]/.test(s[cut.length]!) && /[\uDC00-\uDFFF]/.test(s[cut.length + 1] ?? "") ? 2 : 1),
          );
          expect(jsonStringBytes(next)).toBeGreaterThan(budget);
        }
      }),
    );
  });
});

describe("no webhook body ever exceeds 256 KiB, whatever the task holds", () => {
  const heavy = (max: number) =>
    fc.oneof(
      fc.string({ maxLength: 64 }),
      // Lengths up to max, a third of them in its upper half: large tasks are what this is about.
      fc
        .tuple(
          fc.constantFrom("a", "é", "漢", "😀", '"', "\u0001", "\uD800"),
          fc.oneof(fc.nat(max), fc.integer({ min: Math.floor(max / 2), max })),
        )
        .map(([unit, n]) => unit.repeat(Math.floor(n / unit.length))),
    );
  const json: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
    value: fc.oneof(
      { depthSize: "small" },
      heavy(300_000),
      fc.integer(),
      fc.constant(null),
      fc.array(tie("value"), { maxLength: 4 }),
      fc.dictionary(fc.string({ maxLength: 8 }), tie("value"), { maxKeys: 4 }),
    ),
  })).value;
  const metadata = fc
    .dictionary(fc.string({ minLength: 1, maxLength: 16 }), heavy(300), { maxKeys: 16 })
    .filter((m) => bytes(JSON.stringify(m)) <= 4096);
  const files = fc.array(
    fc
      .record({
        i: fc.nat(1000),
        pad: fc.integer({ min: 0, max: 4000 }),
        error: fc.option(heavy(2_000), { nil: undefined }),
      })
      .map(({ i, pad, error }) => ({ ...file(i, pad), ...(error === undefined ? {} : { error }) })),
    { minLength: 0, maxLength: 64, size: "max" },
  );
  const ending = fc.record({
    status: fc.constantFrom("succeeded", "failed", "canceled", "processing"),
    output: json,
    error: fc.option(
      fc.record({
        code: fc.string({ minLength: 1, maxLength: 256 }),
        message: heavy(400_000),
        request_id: fc.option(fc.string({ maxLength: 256 }), { nil: null }),
      }),
      { nil: null },
    ),
    files: fc.option(files, { nil: null }),
    metadata: fc.option(metadata, { nil: null }),
    model: heavy(8 * 1024),
    upstreamTaskId: fc.string({ minLength: 1, maxLength: 256 }),
  });

  it("valid JSON of the event's schema, within 256 KiB, flags exactly where something was left out", () => {
    const cut = { output: 0, message: 0, files: 0 };
    fc.assert(
      fc.property(ending, (e) => {
        const before = row({
          status: e.status === "processing" ? "queued" : "processing",
          model: e.model || "m",
          upstreamTaskId: e.upstreamTaskId,
          metadataJson: e.metadata ? JSON.stringify(e.metadata) : null,
          phase: e.files ? "mirroring" : "submitted",
        });
        const { payload, body } = endEvent(before, {
          status: e.status as TaskRow["status"],
          outputJson:
            e.status === "succeeded" ? JSON.stringify(e.output === undefined ? null : { result: e.output }) : null,
          errorJson: e.error ? JSON.stringify(e.error) : null,
          filesJson: e.files ? JSON.stringify(e.files) : null,
          ...(e.status === "processing" ? { phase: "submitted", completedAt: null } : {}),
        });
        expectSendable(payload);
        const data = body.data;
        // What was left out says so; what was not is carried as the task holds it.
        if (data.output_omitted !== true && e.status === "succeeded")
          expect(data.output).toEqual({ result: e.output === undefined ? null : e.output });
        if (data.files_truncated !== true && e.files) expect(data.files).toEqual(e.files);
        if (e.metadata) expect(data.metadata).toEqual(e.metadata);
        if (data.output_omitted) cut.output++;
        if ((data.error as { message_truncated?: true } | null)?.message_truncated) cut.message++;
        if (data.files_truncated) cut.files++;
        expect(data).toMatchObject({ id: before.id, status: e.status, upstream_task_id: e.upstreamTaskId });
      }),
      { numRuns: 100 },
    );
    // The generator reaches every cut (else the property would hold for want of large tasks).
    expect(cut.output).toBeGreaterThan(0);
    expect(cut.message).toBeGreaterThan(0);
    expect(cut.files).toBeGreaterThan(0);
  });
});

describe("fitTaskData: one rule, whatever wraps the data", () => {
  it("a list item is held to the same bytes with the same flags", () => {
    const flat = flatTask(row({ status: "succeeded", outputJson: JSON.stringify({ text: "😀".repeat(70_000) }) }));
    const { data, json } = fitTaskData(flat, WEBHOOK_BODY_MAX_BYTES);
    expect(bytes(json)).toBeLessThanOrEqual(WEBHOOK_BODY_MAX_BYTES);
    expect(data).toMatchObject({ output: null, output_omitted: true });
    expect(JSON.parse(json)).toEqual(data);
  });

  it("rows stored before the bounds (a 300,000-character error, a 1 MiB model name) are cut to fit as well", () => {
    const message = '"quoted" 漢 😀 '.repeat(30_000);
    const flat = flatTask(
      row({
        status: "failed",
        model: "m".repeat(1024 * 1024),
        errorJson: JSON.stringify({ code: "upstream_error", message, request_id: null }),
      }),
    );
    const wrap = (data: typeof flat) => ({
      id: "evt_01jf3y8k2m9q7r5t3v1w0x6z4a",
      type: "task.failed",
      timestamp: new Date(NOW).toISOString(),
      data: { ...data, sequence: 2, previous_status: "processing" },
    });
    const { data, json } = fitTaskData(flat, WEBHOOK_BODY_MAX_BYTES, wrap);
    expect(bytes(json)).toBeLessThanOrEqual(WEBHOOK_BODY_MAX_BYTES);
    expect(webhookBodyProblems(json)).toEqual([]);
    expect(data.error).toMatchObject({ code: "upstream_error", message: "", message_truncated: true });
    expect(bytes(JSON.stringify(data.model))).toBeLessThanOrEqual(1024);
  });
});
