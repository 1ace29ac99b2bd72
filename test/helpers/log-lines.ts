import { Writable } from "node:stream";
import { createLogger, type Logger } from "../../src/logger.js";

/** A relay logger whose lines a test reads back, parsed, in the order they were written. */
export function capturedLogger(): { logger: Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      lines.push(JSON.parse(String(chunk)) as Record<string, unknown>);
      done();
    },
  });
  return { logger: createLogger("info", sink), lines };
}
