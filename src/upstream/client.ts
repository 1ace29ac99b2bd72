import type { Clock } from "../clock.js";
import { systemClock } from "../clock.js";
import { deadlineIn, raceSignal, startDeadline, type MinRate } from "../net/deadline.js";
import type { TaskStatus } from "../statuses.js";
import { DEFAULT_MAX_BODY_BYTES, ERROR_BODY_BYTES, type LimitedBody, readLimited } from "./body.js";
import { UpstreamError } from "./errors.js";
import {
  describeTransportError,
  fetchTransport,
  type HeaderGetter,
  isTransportTimeout,
  type UpstreamTransport,
  undiciTransport,
} from "./transport.js";
import { turnTime } from "../next-turn.js";
import { type OffThreadJson, offThreadJson, type ParsedJson } from "./json-offload.js";
import {
  MAX_UPSTREAM_ID_LENGTH,
  namesTaskId,
  parseBooleanHeader,
  parseErrorBody,
  parseJson,
  parseRetryAfter,
  parseTask,
  parseTaskList,
} from "./parse.js";
import type { CreateResult, TaskPage, TaskType, UpstreamTask } from "./types.js";
import { ATTR, httpClientAttributes } from "../telemetry/attributes.js";
import { type CallSpan, telemetry } from "../telemetry/index.js";
import type { TraceContext, TraceHeaders } from "../telemetry/trace-context.js";

export interface UpstreamClientOptions {
  /** No trailing slash; paths /openapi/v1/... are appended. */
  baseUrl: string;
  apiKey: string;
  /**
   * Calls go through this fetch when given (msw, which tests mock the upstream with, intercepts only
   * the global one: pass `(i, init) => globalThis.fetch(i, init)`); otherwise through `transport`.
   */
  fetch?: typeof fetch;
  /**
   * How requests go out (transport.ts) when no `fetch` is given: shared by the clients of one upstream
   * (UpstreamAccounts), closed by its owner. Default: an undici pool of this client's own (`close()`).
   */
  transport?: UpstreamTransport;
  /** Per request, covering the response body too. Default 30 000. */
  timeoutMs?: number;
  userAgent?: string;
  /** Turns an HTTP-date Retry-After into a delay. Defaults to the system clock. */
  clock?: Clock;
  /** Largest response body read (UPSTREAM_MAX_BODY_BYTES); a longer 2xx body is refused while it streams. */
  maxBodyBytes?: number;
  /** Slowest a response body may arrive (DEFAULT_MIN_BODY_RATE); slower, the call ends as a timeout. */
  minBodyRate?: MinRate;
  /** Parses task answers, large ones off the event loop (json-offload.ts). Default: the process's one worker. */
  taskJson?: Pick<OffThreadJson, "parse">;
  /**
   * A long output's pieces stay in the parse worker (HeldJsonPieces) for the store to write from
   * there (SQLite), never reaching this heap. Default false: they come here as they are cut.
   */
  holdLongOutputs?: boolean;
}

export const DEFAULT_TIMEOUT_MS = 30_000;
/**
 * An answer is a few KiB of JSON: one that trickles in at under 1 KiB per 10 s is cut off there,
 * not at the end of the whole call's timeout (docs/decisions/0009-deadlines.md).
 */
export const DEFAULT_MIN_BODY_RATE: MinRate = { bytes: 1024, windowMs: 10_000 };
const DEFAULT_USER_AGENT = "genrelay";

/** The reference's rule for Idempotency-Key (docs/upstream.md, "Creating a task"): 8–128 of letters, digits, `.`, `_`, `:`, `-`. */
export const IDEMPOTENCY_KEY_PATTERN = /^[A-Za-z0-9._:-]{8,128}$/;

export function isValidIdempotencyKey(key: string): boolean {
  return IDEMPOTENCY_KEY_PATTERN.test(key);
}

const CREATE_PATHS: Readonly<Record<TaskType, string>> = {
  image: "/openapi/v1/images/generations",
  video: "/openapi/v1/videos/generations",
};

interface RequestSpec {
  method: "GET" | "POST";
  path: string;
  /** The path as its span is named (`/openapi/v1/tasks/{id}`): ids in span names would make each unique. */
  route: string;
  /** The trace of the task the call is made for: its CLIENT span continues it, its headers carry it. */
  trace?: TraceContext | null | undefined;
  query?: URLSearchParams;
  body?: Record<string, unknown>;
  idempotencyKey?: string;
}

interface RawResponse {
  status: number;
  headers: HeaderGetter;
  /** The body as read (decoded only where its text is asked for). */
  body: LimitedBody;
}

/**
 * Client for the upstream generation API (docs/upstream.md). It makes exactly one
 * HTTP request per call and never retries: retry, backoff and the read budget are
 * the callers' business, and every failure arrives as an UpstreamError that says
 * whether it is retryable.
 */
export class UpstreamClient {
  private readonly baseUrl: string;
  private readonly apiKey: string;
  private readonly transport: UpstreamTransport;
  /** The transport was made here: close() closes it. */
  private readonly ownsTransport: boolean;
  private readonly timeoutMs: number;
  private readonly userAgent: string;
  private readonly clock: Clock;
  private readonly maxBodyBytes: number;
  private readonly minBodyRate: MinRate;
  private readonly taskJsonParser: Pick<OffThreadJson, "parse">;
  private readonly holdLongOutputs: boolean;

  constructor(options: UpstreamClientOptions) {
    if (options.baseUrl.trim() === "") throw new TypeError("UpstreamClient: baseUrl is required");
    if (options.apiKey === "") throw new TypeError("UpstreamClient: apiKey is required");
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
      throw new RangeError("UpstreamClient: timeoutMs must be a positive number");
    }
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.apiKey = options.apiKey;
    this.ownsTransport = options.fetch === undefined && options.transport === undefined;
    this.transport = options.fetch
      ? fetchTransport(this.baseUrl, options.fetch)
      : (options.transport ?? undiciTransport(this.baseUrl, timeoutMs));
    this.timeoutMs = timeoutMs;
    this.userAgent = options.userAgent ?? DEFAULT_USER_AGENT;
    this.clock = options.clock ?? systemClock;
    this.maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
    this.minBodyRate = options.minBodyRate ?? DEFAULT_MIN_BODY_RATE;
    this.taskJsonParser = options.taskJson ?? offThreadJson;
    this.holdLongOutputs = options.holdLongOutputs ?? false;
  }

  /** Closes the connections of a transport this client made itself (none when one was given). */
  async close(): Promise<void> {
    if (this.ownsTransport) await this.transport.close();
  }

  /**
   * POST /openapi/v1/{images|videos}/generations. The same idempotencyKey must be
   * reused on every retry of one relay task: that is what prevents a double charge.
   */
  async createTask(
    type: TaskType,
    body: Record<string, unknown>,
    idempotencyKey: string,
    trace?: TraceContext | null,
  ): Promise<CreateResult> {
    const path = CREATE_PATHS[type];
    return this.call({ method: "POST", path, route: path, body, idempotencyKey, trace }, (res) => this.created(res));
  }

  private async created(res: RawResponse): Promise<CreateResult> {
    const json = await this.taskJson(res);
    const task = parseTask(json);
    if (task === null && namesTaskId(json)) {
      // The upstream accepted the creation (2xx) but named it with an id the relay cannot hold;
      // replays of the same key bring the same id, so asking again is no use (docs/contract.md, "Upstream answers").
      throw new UpstreamError({
        kind: "malformed",
        status: res.status,
        code: "invalid_task_id",
        message: `malformed upstream response (HTTP ${res.status}): the creation's task id cannot be stored (NUL, over ${MAX_UPSTREAM_ID_LENGTH} characters, or not an exact number)`,
        requestId: res.headers.get("x-request-id"),
        retryable: false,
        details: { httpStatus: res.status },
      });
    }
    if (task === null) throw this.malformed(res, "creation response carries no task id");
    const header = parseBooleanHeader(res.headers.get("idempotent-replayed"));
    return {
      task,
      // The header is authoritative when readable; otherwise a 200 (not 201) is the replay.
      replayed: header ?? res.status === 200,
      httpStatus: res.status,
      requestId: requestIdOf(res.headers, json),
    };
  }

  /** GET /openapi/v1/tasks/{id}; `trace` is the relay task's. */
  async getTask(id: string, trace?: TraceContext | null): Promise<UpstreamTask> {
    // An empty id would turn this into a request for the task list.
    if (id === "") throw new TypeError("UpstreamClient.getTask: id must be a non-empty string");
    const path = `/openapi/v1/tasks/${encodeURIComponent(id)}`;
    return this.call({ method: "GET", path, route: "/openapi/v1/tasks/{id}", trace }, async (res) => {
      const task = parseTask(await this.taskJson(res), id);
      if (task === null) throw this.malformed(res, "task response is not a JSON object");
      return task;
    });
  }

  /**
   * GET /openapi/v1/tasks. Resolves null when the body holds no recognisable item
   * array, so the caller can fall back to single reads. A list read is made for no one task: its
   * span links the trace of each relay task it reports (`traceOf`, by upstream id).
   */
  async listTasks(
    params: {
      limit?: number;
      cursor?: string;
      type?: TaskType;
      status?: TaskStatus;
    },
    traceOf?: (upstreamTaskId: string) => TraceContext | null,
  ): Promise<TaskPage | null> {
    const query = new URLSearchParams();
    if (params.limit !== undefined) query.set("limit", String(params.limit));
    if (params.cursor !== undefined) query.set("cursor", params.cursor);
    if (params.type !== undefined) query.set("type", params.type);
    if (params.status !== undefined) query.set("status", params.status);
    const path = "/openapi/v1/tasks";
    return this.call({ method: "GET", path, route: path, query }, async (res, span) => {
      const page = parseTaskList(await this.taskJson(res));
      if (page && traceOf) span.link(page.tasks.flatMap((t) => traceOf(t.id) ?? []));
      return page;
    });
  }

  /** GET /openapi/v1/models: the catalog, verbatim (its shape is not shown in the reference). */
  async getModels(): Promise<unknown> {
    const path = "/openapi/v1/models";
    return this.call({ method: "GET", path, route: path }, (res) => this.json(res));
  }

  /**
   * One call as one CLIENT span (tracing on; docs/operations.md, "Tracing"): the exchange and the
   * reading of its answer, which fails the span too when malformed. Its `traceparent` carries the
   * task's trace id and this call's own span id whether tracing is on or off.
   */
  private call<T>(spec: RequestSpec, read: (res: RawResponse, span: CallSpan) => T | Promise<T>): Promise<T> {
    return telemetry().outgoing(
      {
        name: `${spec.method} ${spec.route}`,
        kind: "client",
        parent: spec.trace ?? null,
        attributes: () => httpClientAttributes(spec.method, `${this.baseUrl}${spec.path}`),
      },
      // Background work shares each turn of the event loop (next-turn.ts, TurnTime): a tick that
      // starts dozens of calls, or dozens of answers that land together, take their turns here.
      (trace, span) =>
        turnTime.run(async () => {
          const res = await this.request(spec, trace, span);
          return turnTime.run(() => read(res, span));
        }),
    );
  }

  /** One HTTP exchange. Resolves only for 2xx; everything else throws an UpstreamError. */
  private async request(spec: RequestSpec, trace: TraceHeaders, span: CallSpan): Promise<RawResponse> {
    const qs = spec.query?.toString() ?? "";
    const path = qs === "" ? spec.path : `${spec.path}?${qs}`;
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.apiKey}`,
      Accept: "application/json",
      "User-Agent": this.userAgent,
      ...trace,
    };
    if (spec.body !== undefined) headers["Content-Type"] = "application/json";
    if (spec.idempotencyKey !== undefined) headers["Idempotency-Key"] = spec.idempotencyKey;

    // One total deadline for the whole exchange (docs/contract.md, "Deadlines everywhere"), so a
    // body that trickles in is cut off too, sooner when it moves below the minimum rate. Both steps
    // are also raced against it: an injected fetch (or a mocked body) that ignores the signal must
    // not hang a worker forever.
    const deadline = startDeadline(this.timeoutMs, { what: `${spec.method} ${spec.path}` });
    const signal = deadline.signal;
    let res: RawResponse;
    try {
      const response = await raceSignal(
        this.transport.send({
          method: spec.method,
          path,
          headers,
          body: spec.body === undefined ? undefined : JSON.stringify(spec.body),
          signal,
        }),
        signal,
      );
      // Never buffered whole: an error answer is read only as far as its message, a 2xx answer up
      // to the limit, and a longer body is cancelled as soon as it crosses it (docs/contract.md, "Upstream answers").
      const ok = response.status >= 200 && response.status < 300;
      const limit = ok ? this.maxBodyBytes : Math.min(this.maxBodyBytes, ERROR_BODY_BYTES);
      const rate = {
        rate: this.minBodyRate,
        what: `the answer to ${spec.method} ${spec.path}`,
        onSlow: (err: Error) => deadline.abort(err),
      };
      const body = await raceSignal(readLimited(response, limit, rate), signal, () => response.cancel());
      res = { status: response.status, headers: response.headers, body };
    } catch (err) {
      const error = this.transportError(err, signal, spec);
      span.fail(error.kind === "timeout" ? "timeout" : error.code, error.message);
      throw error;
    } finally {
      deadline.dispose();
    }
    span.setAttributes({ [ATTR.httpResponseStatusCode]: res.status });
    if (res.status < 200 || res.status >= 300) {
      span.fail(String(res.status));
      throw this.httpError(res);
    }
    if (res.body.truncated) throw this.tooLarge(res);
    return res;
  }

  private json(res: RawResponse): unknown {
    return this.parsedOrThrow(res, parseJson(res.body.text));
  }

  /** A task answer (creation, read, list page): a large one is parsed off the event loop, its outputs kept as text. */
  private async taskJson(res: RawResponse): Promise<unknown> {
    return this.parsedOrThrow(
      res,
      await this.taskJsonParser.parse(res.body, { holdLongOutputs: this.holdLongOutputs }),
    );
  }

  private parsedOrThrow(res: RawResponse, parsed: ParsedJson): unknown {
    if (!parsed.ok) throw this.malformed(res, "response body is not JSON");
    return parsed.value;
  }

  private httpError(res: RawResponse): UpstreamError {
    const body = parseErrorBody(res.body.text);
    return new UpstreamError({
      kind: "http",
      status: res.status,
      code: body.code ?? `http_${res.status}`,
      message: this.redact(body.message ?? `upstream responded with HTTP ${res.status}`),
      requestId: body.requestId ?? res.headers.get("x-request-id"),
      retryAfterMs: parseRetryAfter(res.headers.get("retry-after"), this.clock.now()),
      details: body.details,
    });
  }

  private malformed(res: RawResponse, why: string): UpstreamError {
    return new UpstreamError({
      kind: "malformed",
      code: "malformed_response",
      message: `malformed upstream response (HTTP ${res.status}): ${why}`,
      requestId: res.headers.get("x-request-id"),
      details: { httpStatus: res.status },
    });
  }

  /**
   * A 2xx body over the limit: unreadable, and asking again brings the same body, so not retryable.
   * The caller decides what it means for the task (a read of a finished task that large ends it).
   */
  private tooLarge(res: RawResponse): UpstreamError {
    return new UpstreamError({
      kind: "malformed",
      status: res.status,
      code: "response_too_large",
      message: `upstream response (HTTP ${res.status}) is larger than UPSTREAM_MAX_BODY_BYTES (${this.maxBodyBytes} bytes); it was not read`,
      requestId: res.headers.get("x-request-id"),
      retryable: false,
      details: { httpStatus: res.status, limitBytes: this.maxBodyBytes },
    });
  }

  private transportError(err: unknown, signal: AbortSignal, spec: RequestSpec): UpstreamError {
    const timedOut = signal.aborted || isTransportTimeout(err);
    if (timedOut) {
      const slow = deadlineIn(signal.reason);
      return new UpstreamError({
        kind: "timeout",
        code: "timeout",
        message:
          slow?.kind === "rate"
            ? `${spec.method} ${spec.path} timed out: ${slow.message}`
            : `${spec.method} ${spec.path} timed out after ${this.timeoutMs} ms`,
        cause: err,
      });
    }
    const reason = describeTransportError(err);
    return new UpstreamError({
      kind: "network",
      code: "network_error",
      message: this.redact(`${spec.method} ${spec.path} failed: ${reason}`),
      cause: err,
    });
  }

  /** Upstream text is echoed into errors that get stored and logged; the key must never travel with it. */
  private redact(text: string): string {
    return text.split(this.apiKey).join("[redacted]");
  }
}

function requestIdOf(headers: HeaderGetter, body: unknown): string | null {
  const header = headers.get("x-request-id");
  if (header !== null && header !== "") return header;
  if (typeof body === "object" && body !== null && !Array.isArray(body)) {
    const id = (body as Record<string, unknown>).request_id;
    if (typeof id === "string" && id !== "") return id;
  }
  return null;
}
