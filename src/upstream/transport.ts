import type { Readable } from "node:stream";
import { finished } from "node:stream";
import { Pool } from "undici";

/**
 * How the upstream client sends one request and reads its answer (issue #43): undici's `Pool.request`
 * by default, Node's global `fetch` when one is injected (msw, which tests mock the upstream with,
 * intercepts only that). The global fetch costs about ten times the CPU a call (web streams, `Headers`,
 * the fetch spec's steps; bench/upstream-call-cost.mjs), and the relay calls the upstream at least
 * twice a task.
 */
export interface UpstreamTransport {
  /** Resolves once the status and headers are in; the body is left to read. Rejects when the signal aborts. */
  send(request: TransportRequest): Promise<TransportResponse>;
  /** Ends the transport's connections (the relay's stop). */
  close(): Promise<void>;
}

export interface TransportRequest {
  method: "GET" | "POST";
  /** What follows the base URL: the path and the query. */
  path: string;
  headers: Record<string, string>;
  body?: string | undefined;
  signal: AbortSignal;
}

/** The part of `Headers` the client reads. */
export interface HeaderGetter {
  get(name: string): string | null;
}

export interface TransportResponse {
  status: number;
  headers: HeaderGetter;
  /** The body's next chunk, null at its end. */
  read(): Promise<Uint8Array | null>;
  /** Stops the body where it is (its connection is closed); never throws. */
  cancel(): void;
}

/**
 * Whether a send failed on a timeout that is not the call's own deadline: fetch's `TimeoutError`, or
 * undici's header and body timeouts (the pool's backstop, undiciTransport).
 */
export function isTransportTimeout(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (err.name === "TimeoutError") return true;
  const code = (err as { code?: unknown }).code;
  return code === "UND_ERR_HEADERS_TIMEOUT" || code === "UND_ERR_BODY_TIMEOUT";
}

/** Why a send failed, in one line: fetch hides the useful part (ECONNREFUSED, ENOTFOUND…) in err.cause. */
export function describeTransportError(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause;
  if (cause instanceof Error && cause.message !== "" && cause.message !== err.message) {
    return `${err.message} (${cause.message})`;
  }
  return err.message;
}

const ignore = () => undefined;

/** A fetch answer seen through the port: its body read through a web stream reader. */
export function fetchResponse(response: Response): TransportResponse {
  let reader: ReadableStreamDefaultReader<Uint8Array> | null = null;
  return {
    status: response.status,
    headers: response.headers,
    async read() {
      if (response.body === null) return null;
      reader ??= response.body.getReader();
      const { done, value } = await reader.read();
      return done ? null : value;
    },
    cancel() {
      // Not awaited: a teed body (a fetch wrapper that clones responses) settles its cancel only
      // once every branch is cancelled, and the reading is over either way.
      if (reader !== null) void reader.cancel().catch(ignore);
      else void response.body?.cancel().catch(ignore);
    },
  };
}

/** Sends to `baseUrl` through `fetch`: the global one, or one a test injects. */
export function fetchTransport(baseUrl: string, fetchImpl: typeof fetch): UpstreamTransport {
  const base = baseUrl.replace(/\/+$/, "");
  return {
    async send(request) {
      const response = await fetchImpl(`${base}${request.path}`, {
        method: request.method,
        headers: request.headers,
        body: request.body,
        signal: request.signal,
      });
      return fetchResponse(response);
    },
    async close() {},
  };
}

/** Connections kept to the upstream: above what the submitter and poller run at once, as fetch's own is unbounded. */
const POOL_CONNECTIONS = 256;

/**
 * One undici `Pool` per upstream origin, with keep-alive; made at the first call, so a client that never
 * calls opens nothing. A base URL's path (`https://host/prefix`) is kept in front of every request's.
 * undici's own header and body timeouts stay at the client's deadline as a backstop: the client's
 * deadline (a signal) ends the call first.
 */
export function undiciTransport(baseUrl: string, timeoutMs: number): UpstreamTransport {
  let pool: Pool | null = null;
  let closed = false;
  const url = new URL(baseUrl);
  const origin = url.origin;
  const prefix = url.pathname.replace(/\/+$/, "");
  return {
    async send(request) {
      if (closed) throw new Error("the upstream transport is closed");
      pool ??= new Pool(origin, {
        connections: POOL_CONNECTIONS,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
      const answer = await pool.request({
        method: request.method,
        path: `${prefix}${request.path}`,
        headers: request.headers,
        body: request.body ?? null,
        signal: request.signal,
      });
      const body = answer.body;
      let next: (() => Promise<Buffer | null>) | null = null;
      const headers = answer.headers;
      return {
        status: answer.statusCode,
        headers: {
          get(name) {
            const value = headers[name.toLowerCase()];
            if (value === undefined) return null;
            return Array.isArray(value) ? value.join(", ") : value;
          },
        },
        read() {
          next ??= chunkReader(body);
          return next();
        },
        cancel() {
          body.destroy();
        },
      };
    },
    async close() {
      closed = true;
      if (pool === null) return;
      const p = pool;
      pool = null;
      // A call still in flight has its own deadline; the relay's stop does not wait that long.
      const grace = new Promise<boolean>((r) => setTimeout(() => r(false), 1_000).unref());
      const done = await Promise.race([p.close().then(() => true), grace]);
      if (!done) await p.destroy().catch(ignore);
    },
  };
}

/** Bytes a body's reader holds before it pauses the stream (and undici, the socket). */
const HELD_BYTES = 1024 * 1024;

/**
 * A stream's chunks one at a time, as they arrived. A `for await` over a Readable takes what piled up
 * while the reader was away (readLimited yields between slices: turnBytes) as one new buffer, the
 * chunks copied into it (up to the stream's high-water mark and a chunk, 80 KiB a read here): every
 * byte of a long answer copied once more on the event loop, in big-outputs' profile the largest part
 * of reading it (126 of 192 ms of late turns). Here the chunks are kept as they came, at most
 * HELD_BYTES of them before the stream is paused. An error or a premature close (the call's signal
 * aborted it) rejects the next read; the chunks still held are dropped.
 */
function chunkReader(body: Readable): () => Promise<Buffer | null> {
  const queue: Buffer[] = [];
  let held = 0;
  let ended = false;
  let failure: Error | null = null;
  let wake: (() => void) | null = null;
  const notify = () => {
    const w = wake;
    wake = null;
    w?.();
  };
  body.on("data", (chunk: Buffer) => {
    queue.push(chunk);
    held += chunk.byteLength;
    if (held >= HELD_BYTES) body.pause();
    notify();
  });
  finished(body, (err) => {
    ended = true;
    failure = err ?? null;
    notify();
  });
  return async () => {
    for (;;) {
      if (failure !== null) throw failure;
      const chunk = queue.shift();
      if (chunk !== undefined) {
        held -= chunk.byteLength;
        if (held < HELD_BYTES && !ended && body.isPaused()) body.resume();
        return chunk;
      }
      if (ended) return null;
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
    }
  };
}
