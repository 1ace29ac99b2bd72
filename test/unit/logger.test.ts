import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { createLogger } from "../../src/logger.js";

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
});
