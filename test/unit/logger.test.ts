import fs from "node:fs";
import { mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { describe, expect, it, vi } from "vitest";
import {
  attemptLines,
  createLogger,
  fixedFieldsLogger,
  LOG_WRITE_BYTES,
  logDestination,
  requestLines,
} from "../../src/logger.js";

/** The lines a logger wrote, parsed. */
function capture() {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split("\n")) if (line) lines.push(JSON.parse(line));
      done();
    },
  });
  return { lines, stream };
}

/** What a logger wrote, chunk by chunk, as text. */
function rawText() {
  const raw: string[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      raw.push(String(chunk));
      done();
    },
  });
  return { raw, stream };
}

describe("createLogger", () => {
  it("writes a line's own fields with tracing off, line after line (the mixin's object is never shared)", () => {
    const { lines, stream } = capture();
    const logger = createLogger("info", stream);
    logger.warn({ simulator: "http://127.0.0.1:1" }, "SANDBOX MODE");
    logger.info({ task_id: "task_1" }, "second");
    expect(lines.map(({ msg, simulator, task_id }) => ({ msg, simulator, task_id }))).toEqual([
      { msg: "SANDBOX MODE", simulator: "http://127.0.0.1:1", task_id: undefined },
      { msg: "second", simulator: undefined, task_id: "task_1" },
    ]);
    expect(lines.some((line) => "trace_id" in line)).toBe(false);
  });

  it("fixedFieldsLogger writes the same line without the redaction pass; the logger it comes from still redacts", () => {
    const { lines, stream } = capture();
    const logger = createLogger("info", stream);
    fixedFieldsLogger(logger).info({ event_id: "evt_1", status_code: 200, key: "k" }, "webhook attempt");
    logger.info({ event_id: "evt_1", status_code: 200, key: "k" }, "webhook attempt");
    const [lean, redacted] = lines.map(({ time, ...rest }) => rest);
    expect(lean).toEqual({
      level: "info",
      service: "genrelay",
      event_id: "evt_1",
      status_code: 200,
      key: "k",
      msg: "webhook attempt",
    });
    expect(redacted).toEqual({ ...lean, key: "[redacted]" });
  });

  it("requestLines writes the request line pino writes, byte for byte but the time, at the logger's level", () => {
    const { raw, stream } = rawText();
    const logger = createLogger("info", stream);
    const write = requestLines(logger);
    const hostile = { request_id: "req_x", method: 'P"O\\ST', path: "/a\n\u0000é", status: 201, ms: 1.5 };
    const lines = [
      hostile,
      { ...hostile, method: "GET", status: 503, ms: 0, client_id: "cli_1" },
      { ...hostile, request_id: undefined },
    ];
    for (const line of lines) {
      const level = line.status === 503 ? "warn" : "info";
      write(level, line);
      logger.child({}, { redact: [] })[level](line, "request");
    }
    const withoutTime = raw.map((l) => l.replace(/"time":"[^"]+"/, '"time":"T"'));
    expect(withoutTime[0]).toBe(withoutTime[1]);
    expect(withoutTime[2]).toBe(withoutTime[3]);
    expect(withoutTime[4]).toBe(withoutTime[5]);
    expect(JSON.parse(raw[2]!)).toEqual({
      level: "warn",
      time: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      service: "genrelay",
      request_id: "req_x",
      method: "GET",
      path: "/a\n\u0000é",
      status: 503,
      ms: 0,
      client_id: "cli_1",
      msg: "request",
    });
    // Below the logger's level: nothing written.
    const { raw: quiet, stream: quietStream } = rawText();
    const warnOnly = createLogger("warn", quietStream);
    requestLines(warnOnly)("info", hostile);
    expect(quiet).toEqual([]);
  });

  it("attemptLines writes the attempt line pino writes, byte for byte but the time, nulls and all", () => {
    const { raw, stream } = rawText();
    const logger = createLogger("info", stream);
    const write = attemptLines(logger);
    const failed = {
      event_id: "evt_1",
      destination: "callback",
      task_id: "task_1",
      client_id: "cli_1",
      type: "task.succeeded",
      attempt: 2,
      status_code: null,
      latency_ms: 5_000,
      outcome: "retrying",
      error: 'timeout after 5000 ms: "quoted"\n\u0000é',
    };
    const lines = [
      failed,
      {
        ...failed,
        task_id: null,
        status_code: 200,
        latency_ms: 12,
        outcome: "delivered",
        error: undefined,
        trace_id: "0af7651916cd43dd8448eb211c80319c",
        span_id: "b7ad6b7169203331",
      },
      { ...failed, latency_ms: Number.NaN },
    ];
    for (const line of lines) {
      write("info", line);
      logger.child({}, { redact: [] }).info(line, "webhook attempt");
    }
    const withoutTime = raw.map((l) => l.replace(/"time":"[^"]+"/, '"time":"T"'));
    expect(withoutTime[0]).toBe(withoutTime[1]);
    expect(withoutTime[2]).toBe(withoutTime[3]);
    expect(withoutTime[4]).toBe(withoutTime[5]);
    expect(JSON.parse(raw[2]!)).toEqual({
      level: "info",
      time: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      service: "genrelay",
      event_id: "evt_1",
      destination: "callback",
      task_id: null,
      client_id: "cli_1",
      type: "task.succeeded",
      attempt: 2,
      status_code: 200,
      latency_ms: 12,
      outcome: "delivered",
      trace_id: "0af7651916cd43dd8448eb211c80319c",
      span_id: "b7ad6b7169203331",
      msg: "webhook attempt",
    });
    const { raw: quiet, stream: quietStream } = rawText();
    const warnOnly = createLogger("warn", quietStream);
    attemptLines(warnOnly)("info", failed);
    expect(quiet).toEqual([]);
  });

  it("the default destination gathers lines into few writes, and writes a few lines before long all the same", async () => {
    const dir = mkdtempSync(join(tmpdir(), "genrelay-log-"));
    const path = join(dir, "out.log");
    const writes = vi.spyOn(fs, "write");
    try {
      const destination = logDestination(openSync(path, "a"));
      // Writes finished (their callbacks run): the file may show a write's lines before it has.
      let finished = 0;
      (destination as unknown as NodeJS.EventEmitter).on("write", () => finished++);
      const write = requestLines(createLogger("info", destination));
      const line = { request_id: "req_x", method: "POST", path: "/openapi/v1/images/generations", status: 201, ms: 1 };
      const fileLines = () => readFileSync(path, "utf8").split("\n").filter(Boolean);
      // A few lines: nothing written at once, then all of them in one write (the periodic flush).
      for (let i = 0; i < 5; i++) write("info", line);
      expect(writes).not.toHaveBeenCalled();
      await vi.waitFor(
        () => {
          expect(fileLines()).toHaveLength(5);
          // Until the first write is over, sonic-boom gathers lines past LOG_WRITE_BYTES without writing.
          expect(finished).toBe(1);
        },
        { timeout: 2_000, interval: 5 },
      );
      const firstWrites = writes.mock.calls.filter(([, data]) => String(data) !== "").length;
      expect(firstWrites).toBe(1);
      // Past LOG_WRITE_BYTES a write starts without waiting for the flush: one for all those lines.
      const many = Math.ceil(LOG_WRITE_BYTES / 150) + 1;
      for (let i = 0; i < many; i++) write("info", line);
      expect(writes.mock.calls.filter(([, data]) => String(data) !== "").length).toBe(firstWrites + 1);
      await vi.waitFor(() => expect(fileLines()).toHaveLength(5 + many), { timeout: 2_000, interval: 5 });
      (destination as unknown as { end(): void }).end();
    } finally {
      writes.mockRestore();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
