import { afterAll, vi } from "vitest";

/**
 * The integration files share one process and one module graph (vitest.config.ts, `isolate: false`):
 * a fork and a fresh import of the relay's sources per file cost more CPU than most files' tests.
 * What a file changes in the process outside its own modules is put back when it ends, so the next
 * file starts as it would in a fresh process:
 * - the fetch globals: @hono/node-server's `serve` replaces `Request` and `Response` with its own
 *   classes, on which msw's `HttpResponse.error()` is no network error (a file serving a relay made
 *   money.test.ts's dropped connection an answer);
 * - `process.env` (a file deletes or sets variables at import time, before any hook of its own);
 * - fake timers a failed test left installed.
 * This file runs again before each test file, so the snapshot below is taken before that file is imported.
 */
const FETCH_GLOBALS = ["Request", "Response", "Headers", "FormData", "fetch"] as const;
const globals = FETCH_GLOBALS.map((name) => [name, Object.getOwnPropertyDescriptor(globalThis, name)] as const);
const env = { ...process.env };

afterAll(() => {
  for (const [name, descriptor] of globals) if (descriptor) Object.defineProperty(globalThis, name, descriptor);
  for (const name of Object.keys(process.env)) if (!(name in env)) delete process.env[name];
  Object.assign(process.env, env);
  vi.useRealTimers();
});
