import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  MAX_RETRY_AFTER_MS,
  mapStatus,
  parseBooleanHeader,
  parseErrorBody,
  parseErrorInfo,
  parseJson,
  parseRetryAfter,
  parseTask,
  parseTaskList,
} from "../../src/upstream/parse.js";

const NO_USAGE = { pointsCharged: null, pointsRefunded: null };

describe("mapStatus", () => {
  it.each([
    ["queued", "queued"],
    ["pending", "queued"],
    ["created", "queued"],
    ["processing", "processing"],
    ["running", "processing"],
    ["in_progress", "processing"],
    ["IN-PROGRESS", "processing"],
    ["succeeded", "succeeded"],
    ["success", "succeeded"],
    ["Completed", "succeeded"],
    ["failed", "failed"],
    ["ERROR", "failed"],
    ["canceled", "canceled"],
    ["cancelled", "canceled"],
    ["  Queued ", "queued"],
  ] as const)("%j → %s", (input, expected) => {
    expect(mapStatus(input)).toBe(expected);
  });

  it.each([["paused"], [""], ["toString"], ["__proto__"], [null], [undefined], [1], [{}], [["queued"]]])(
    "%j → null",
    (input) => {
      expect(mapStatus(input)).toBeNull();
    },
  );
});

describe("parseTask", () => {
  it("reads the documented shape: data.id/status, top-level output and usage", () => {
    const body = {
      data: { id: "t_1", status: "succeeded" },
      output: { images: [{ url: "https://cdn.example/a.png" }] },
      usage: { points_charged: 20, points_refunded: 0 },
    };
    expect(parseTask(body)).toEqual({
      id: "t_1",
      status: "succeeded",
      output: { images: [{ url: "https://cdn.example/a.png" }] },
      usage: { pointsCharged: 20, pointsRefunded: 0 },
      error: null,
      raw: body,
    });
  });

  it("reads a flattened task", () => {
    const body = { id: "t_2", status: "processing", output: null, usage: { points_charged: 500 } };
    expect(parseTask(body)).toEqual({
      id: "t_2",
      status: "processing",
      output: null,
      usage: { pointsCharged: 500, pointsRefunded: null },
      error: null,
      raw: body,
    });
  });

  it("reads everything nested under data", () => {
    const body = {
      data: {
        task_id: "t_3",
        status: "failed",
        output: "verbatim-string",
        usage: { points_charged: 40, points_refunded: 40 },
        error: { code: "generation_failed", message: "nsfw", request_id: "req_9" },
      },
    };
    expect(parseTask(body)).toEqual({
      id: "t_3",
      status: "failed",
      output: "verbatim-string",
      usage: { pointsCharged: 40, pointsRefunded: 40 },
      error: { code: "generation_failed", message: "nsfw", request_id: "req_9" },
      raw: body,
    });
  });

  it("finds the id at data.id, id, data.task_id, task_id in that order", () => {
    expect(parseTask({ data: { id: "a", task_id: "x" }, id: "b", task_id: "c" })?.id).toBe("a");
    expect(parseTask({ id: "b", data: { task_id: "x" }, task_id: "c" })?.id).toBe("b");
    expect(parseTask({ data: { task_id: "x" }, task_id: "c" })?.id).toBe("x");
    expect(parseTask({ task_id: "c" })?.id).toBe("c");
    expect(parseTask({ id: 42 })?.id).toBe("42");
  });

  it("returns null without an id", () => {
    expect(parseTask({ data: { status: "queued" } })).toBeNull();
    expect(parseTask({ id: "" })).toBeNull();
    expect(parseTask({ id: null })).toBeNull();
    expect(parseTask({ id: { nested: true } })).toBeNull();
    expect(parseTask(null)).toBeNull();
    expect(parseTask("t_1")).toBeNull();
    expect(parseTask([{ id: "t_1" }])).toBeNull();
    expect(parseTask({ data: [{ id: "t_1" }] })).toBeNull();
  });

  it("uses the fallback id only for an object body", () => {
    expect(parseTask({ status: "running" }, "t_known")).toMatchObject({ id: "t_known", status: "processing" });
    expect(parseTask({ id: "t_body" }, "t_known")?.id).toBe("t_body");
    expect(parseTask([], "t_known")).toBeNull();
    expect(parseTask("text", "t_known")).toBeNull();
  });

  it("maps an unknown status to null and prefers a known one wherever it is", () => {
    expect(parseTask({ id: "t", status: "warming_up" })?.status).toBeNull();
    expect(parseTask({ id: "t" })?.status).toBeNull();
    expect(parseTask({ id: "t", data: { status: "weird" }, status: "succeeded" })?.status).toBe("succeeded");
    expect(parseTask({ id: "t", data: { status: "queued" }, status: "succeeded" })?.status).toBe("queued");
  });

  it("keeps output verbatim and gives null when it is absent", () => {
    const output = { video: { url: "https://cdn.example/v.mp4", meta: [1, 2, { x: null }] } };
    const task = parseTask({ id: "t", output });
    expect(task?.output).toBe(output);
    expect(parseTask({ id: "t", data: { output: [1, 2] } })?.output).toEqual([1, 2]);
    expect(parseTask({ id: "t", output: null, data: { output: "nested" } })?.output).toBe("nested");
    expect(parseTask({ id: "t", output: false })?.output).toBe(false);
    expect(parseTask({ id: "t" })?.output).toBeNull();
  });

  it("never reads a charge as free: missing, negative, fractional, out-of-range or junk is untrusted (null)", () => {
    expect(parseTask({ id: "t", usage: { points_charged: true, points_refunded: true } })?.usage).toEqual(NO_USAGE);
    expect(parseTask({ id: "t", usage: "lots" })?.usage).toEqual(NO_USAGE);
    expect(parseTask({ id: "t", usage: [20] })?.usage).toEqual(NO_USAGE);
    for (const bad of [-100000, -1, 40.5, 1e19, 2 ** 31, Number.NaN, "-5", "40.5", "1e3", "forty", "", null, {}]) {
      expect(parseTask({ id: "t", usage: { points_charged: bad } })?.usage.pointsCharged, String(bad)).toBeNull();
    }
    expect(parseTask({ id: "t", usage: { points_charged: 0, points_refunded: 1.5 } })?.usage).toEqual({
      pointsCharged: 0,
      pointsRefunded: null,
    });
    // A numeric string is read as its number.
    expect(parseTask({ id: "t", usage: { points_charged: "40", points_refunded: " 10 " } })?.usage).toEqual({
      pointsCharged: 40,
      pointsRefunded: 10,
    });
    // A refund above the charge would give the client room nobody paid for.
    expect(parseTask({ id: "t", usage: { points_charged: 20, points_refunded: 30 } })?.usage).toEqual({
      pointsCharged: 20,
      pointsRefunded: null,
    });
    // Field by field: a top-level usage without a number does not hide data.usage.
    expect(
      parseTask({ id: "t", usage: { points_charged: 30 }, data: { usage: { points_refunded: 30 } } })?.usage,
    ).toEqual({ pointsCharged: 30, pointsRefunded: 30 });
  });

  it("refuses an id the store cannot hold (NUL, over 256 characters, an inexact number)", () => {
    expect(parseTask({ id: "up_\u0000evil" })).toBeNull();
    expect(parseTask({ id: "x".repeat(257) })).toBeNull();
    expect(parseTask({ id: 1e21 })).toBeNull();
    expect(parseTask({ id: 1.5 })).toBeNull();
    expect(parseTask({ id: 42 })?.id).toBe("42");
    expect(parseTask({ id: "x".repeat(256) })?.id).toHaveLength(256);
  });

  it("keeps no NUL of an upstream error's text", () => {
    expect(
      parseTask({ id: "t", error: { code: "bad\u0000code", message: "a\u0000b", request_id: "r\u0000" } })?.error,
    ).toEqual({
      code: "upstream_error",
      message: "a\ufffdb",
      request_id: null,
    });
  });

  it("reads the task error at error or data.error", () => {
    expect(parseTask({ id: "t", error: { code: "c", message: "m" } })?.error).toEqual({
      code: "c",
      message: "m",
      request_id: null,
    });
    expect(parseTask({ id: "t", data: { error: { message: "boom" } } })?.error).toEqual({
      code: "upstream_error",
      message: "boom",
      request_id: null,
    });
    expect(parseTask({ id: "t", error: null })?.error).toBeNull();
    expect(parseTask({ id: "t", error: {} })?.error).toBeNull();
  });
});

describe("parseErrorInfo", () => {
  it("tolerates strings, numbers and junk", () => {
    expect(parseErrorInfo("went wrong")).toEqual({ code: "upstream_error", message: "went wrong", request_id: null });
    expect(parseErrorInfo({ code: 500 })).toEqual({ code: "500", message: "", request_id: null });
    expect(parseErrorInfo({ code: "x", message: 5, request_id: 7 })).toEqual({
      code: "x",
      message: "",
      request_id: null,
    });
    expect(parseErrorInfo("")).toBeNull();
    expect(parseErrorInfo(3)).toBeNull();
    expect(parseErrorInfo([])).toBeNull();
  });
});

describe("parseTaskList", () => {
  const item = (id: string, status = "queued") => ({ data: { id, status }, output: null, usage: {} });

  it.each([
    ["data (array)", { data: [item("a"), item("b")] }],
    ["data.items", { data: { items: [item("a"), item("b")] } }],
    ["data.tasks", { data: { tasks: [item("a"), item("b")] } }],
    ["items", { items: [item("a"), item("b")] }],
    ["tasks", { tasks: [item("a"), item("b")] }],
  ])("finds items at %s", (_where, body) => {
    const page = parseTaskList(body);
    expect(page?.tasks.map((t) => t.id)).toEqual(["a", "b"]);
    expect(page?.nextCursor).toBeNull();
  });

  it("parses flattened and wrapped items alike and skips items without an id", () => {
    const page = parseTaskList({
      data: [
        { id: "flat", status: "Succeeded", output: { url: "u" }, usage: { points_charged: 5 } },
        { data: { id: "wrapped", status: "running" }, output: null, usage: { points_refunded: 2 } },
        { status: "queued" },
        "junk",
        null,
      ],
    });
    expect(page).toEqual({
      tasks: [
        {
          id: "flat",
          status: "succeeded",
          output: { url: "u" },
          usage: { pointsCharged: 5, pointsRefunded: null },
          error: null,
          raw: { id: "flat", status: "Succeeded", output: { url: "u" }, usage: { points_charged: 5 } },
        },
        {
          id: "wrapped",
          status: "processing",
          output: null,
          usage: { pointsCharged: null, pointsRefunded: 2 },
          error: null,
          raw: { data: { id: "wrapped", status: "running" }, output: null, usage: { points_refunded: 2 } },
        },
      ],
      nextCursor: null,
    });
  });

  it.each([
    ["next_cursor", { data: [], next_cursor: "c1" }],
    ["data.next_cursor", { data: { items: [], next_cursor: "c1" } }],
    ["cursor.next", { items: [], cursor: { next: "c1" } }],
    ["next", { tasks: [], next: "c1" }],
  ])("finds the next cursor at %s", (_where, body) => {
    expect(parseTaskList(body)?.nextCursor).toBe("c1");
  });

  it("treats a null, empty or non-string cursor as the last page", () => {
    expect(parseTaskList({ data: [], next_cursor: null })?.nextCursor).toBeNull();
    expect(parseTaskList({ data: [], next_cursor: "" })?.nextCursor).toBeNull();
    expect(parseTaskList({ data: [], next_cursor: 12 })?.nextCursor).toBeNull();
    expect(parseTaskList({ data: [], cursor: "c1" })?.nextCursor).toBeNull();
  });

  it("returns null when no item array is found", () => {
    expect(parseTaskList({ data: { id: "t_1" } })).toBeNull();
    expect(parseTaskList({ results: [item("a")] })).toBeNull();
    expect(parseTaskList({ data: { items: "nope" } })).toBeNull();
    expect(parseTaskList([item("a")])).toBeNull();
    expect(parseTaskList(null)).toBeNull();
    expect(parseTaskList("text")).toBeNull();
  });

  it("accepts an empty page", () => {
    expect(parseTaskList({ data: [] })).toEqual({ tasks: [], nextCursor: null });
  });
});

describe("parseErrorBody", () => {
  it("reads the documented error envelope", () => {
    const text = JSON.stringify({
      error: { code: "validation_error", message: "bad", request_id: "req_1", details: [{ field: "duration" }] },
    });
    expect(parseErrorBody(text)).toEqual({
      code: "validation_error",
      message: "bad",
      requestId: "req_1",
      details: [{ field: "duration" }],
    });
  });

  it("reads code and message at the top level", () => {
    expect(parseErrorBody(JSON.stringify({ code: "rate_limit", message: "slow", request_id: "r" }))).toEqual({
      code: "rate_limit",
      message: "slow",
      requestId: "r",
      details: undefined,
    });
  });

  it("reads a string error and a top-level request_id beside the envelope", () => {
    expect(parseErrorBody(JSON.stringify({ error: "Unauthorized", request_id: "r2" }))).toEqual({
      code: null,
      message: "Unauthorized",
      requestId: "r2",
      details: undefined,
    });
  });

  it("keeps a short excerpt of a non-JSON body as the message", () => {
    expect(parseErrorBody("<html>Bad Gateway</html>")).toEqual({
      code: null,
      message: "<html>Bad Gateway</html>",
      requestId: null,
      details: undefined,
    });
    const long = parseErrorBody("x".repeat(5000));
    expect(long.message?.length).toBeLessThanOrEqual(301);
  });

  it("gives nothing for an empty body or JSON without fields", () => {
    const empty = { code: null, message: null, requestId: null, details: undefined };
    expect(parseErrorBody("")).toEqual(empty);
    expect(parseErrorBody("   ")).toEqual(empty);
    expect(parseErrorBody("null")).toEqual(empty);
    expect(parseErrorBody("[1,2]")).toEqual(empty);
    expect(parseErrorBody("{}")).toEqual(empty);
  });
});

describe("parseRetryAfter", () => {
  const now = Date.UTC(2026, 0, 1, 12, 0, 0);

  it("reads delta-seconds", () => {
    expect(parseRetryAfter("0", now)).toBe(0);
    expect(parseRetryAfter("7", now)).toBe(7000);
    expect(parseRetryAfter(" 30 ", now)).toBe(30_000);
    expect(parseRetryAfter("1.5", now)).toBe(1500);
  });

  it("reads an HTTP-date relative to now, and a past date as 0", () => {
    expect(parseRetryAfter(new Date(now + 45_000).toUTCString(), now)).toBe(45_000);
    expect(parseRetryAfter("Thu, 01 Jan 2026 12:02:00 GMT", now)).toBe(120_000);
    expect(parseRetryAfter("Thu, 01 Jan 2026 11:00:00 GMT", now)).toBe(0);
  });

  it("caps at one hour", () => {
    expect(parseRetryAfter("86400", now)).toBe(MAX_RETRY_AFTER_MS);
    expect(parseRetryAfter(new Date(now + 3 * 86_400_000).toUTCString(), now)).toBe(MAX_RETRY_AFTER_MS);
    expect(MAX_RETRY_AFTER_MS).toBe(3_600_000);
  });

  it("ignores what it cannot read", () => {
    for (const v of [null, undefined, "", "soon", "-5", "1e3", "12:00", "2026-13-45"]) {
      expect(parseRetryAfter(v, now)).toBeNull();
    }
  });
});

describe("small readers", () => {
  it("parseJson never throws", () => {
    expect(parseJson('{"a":1}')).toEqual({ ok: true, value: { a: 1 } });
    expect(parseJson("null")).toEqual({ ok: true, value: null });
    expect(parseJson("")).toEqual({ ok: false });
    expect(parseJson("{oops")).toEqual({ ok: false });
  });

  it("parseBooleanHeader", () => {
    expect(parseBooleanHeader("true")).toBe(true);
    expect(parseBooleanHeader("TRUE")).toBe(true);
    expect(parseBooleanHeader("1")).toBe(true);
    expect(parseBooleanHeader("false")).toBe(false);
    expect(parseBooleanHeader(null)).toBeNull();
    expect(parseBooleanHeader("maybe")).toBeNull();
  });
});

describe("properties: arbitrary JSON never throws", () => {
  // Bias towards the keys the reader looks for so the interesting paths are exercised.
  const key = fc.oneof(
    fc.constantFrom("data", "id", "task_id", "status", "output", "usage", "error", "items", "tasks"),
    fc.constantFrom("next_cursor", "cursor", "next", "points_charged", "points_refunded", "code", "message"),
    fc.constantFrom("request_id", "details", "__proto__", "constructor"),
    fc.string(),
  );
  const json = fc.letrec((tie) => ({
    value: fc.oneof(
      { depthSize: "small" },
      fc.constant(null),
      fc.boolean(),
      fc.double(),
      fc.string(),
      fc.constantFrom("queued", "RUNNING", "completed", "cancelled"),
      fc.array(tie("value"), { maxLength: 4 }),
      fc.dictionary(key, tie("value"), { maxKeys: 6 }),
    ),
  })).value;

  it("parseTask / parseTaskList / parseErrorInfo", () => {
    fc.assert(
      fc.property(json, (v) => {
        const task = parseTask(v);
        if (task !== null) {
          expect(typeof task.id).toBe("string");
          expect(task.id.length).toBeGreaterThan(0);
          expect([null, "queued", "processing", "succeeded", "failed", "canceled"]).toContain(task.status);
          expect(task.raw).toBe(v);
        }
        const page = parseTaskList(v);
        if (page !== null) {
          expect(Array.isArray(page.tasks)).toBe(true);
          expect(page.nextCursor === null || page.nextCursor.length > 0).toBe(true);
        }
        parseErrorInfo(v);
      }),
      { numRuns: 2000 },
    );
  });

  it("parseErrorBody on any text, JSON or not", () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string(),
          json.map((v) => JSON.stringify(v) ?? ""),
        ),
        (text) => {
          const parsed = parseErrorBody(text);
          expect(parsed.code === null || typeof parsed.code === "string").toBe(true);
        },
      ),
      { numRuns: 1000 },
    );
  });

  it("parseRetryAfter stays within [0, 1 h] or null", () => {
    fc.assert(
      fc.property(fc.string(), fc.integer({ min: 0, max: 4_000_000_000_000 }), (v, now) => {
        const ms = parseRetryAfter(v, now);
        expect(ms === null || (ms >= 0 && ms <= MAX_RETRY_AFTER_MS)).toBe(true);
      }),
    );
  });
});
