import { http, HttpResponse } from "msw";
import type { FakeClock } from "./fake-clock.js";
import { UPSTREAM_URL } from "./relay.js";

/** One POST …/generations the fake upstream received. */
export interface CreateCall {
  type: "image" | "video";
  key: string | null;
  auth: string | null;
  body: Record<string, unknown>;
  /** Fake-clock time of the request. */
  at: number;
}

/** One task read the fake upstream received: GET /tasks/{id}, or a list page (id "(list)"). */
export interface ReadCall {
  id: string;
  at: number;
  /** The list's status filter, for list reads. */
  status?: string | null;
}

export interface FakeTask {
  id: string;
  key: string;
  type: "image" | "video";
  status: "queued" | "processing" | "succeeded" | "failed" | "canceled";
  output?: unknown;
  /** Numbers normally; a hostile upstream (issue #22) may send anything. */
  usage?: { points_charged?: unknown; points_refunded?: unknown };
  error?: { code: string; message: string; request_id?: string };
  /** Fake-clock time of creation. */
  createdAt?: number;
}

/** What a responder returns: a Response to send, or undefined for the default behaviour. */
type Responder<C> = (call: C) => Response | undefined;

export const upstreamError = (
  status: number,
  code: string,
  message: string,
  requestId: string,
  headers: Record<string, string> = {},
) => HttpResponse.json({ error: { code, message, request_id: requestId } }, { status, headers });

/**
 * A small stateful model of the upstream (docs/upstream.md) behind msw: creation with Idempotency-Key
 * replay, task reads, and an optional concurrency limit. Tests script exceptions with responders:
 * `nextCreate`/`nextRead` answer the next calls in order, `onCreate`/`onRead` every call.
 * Every call is recorded with the fake clock's time.
 */
export class FakeUpstream {
  readonly creates: CreateCall[] = [];
  readonly reads: ReadCall[] = [];
  readonly tasks = new Map<string, FakeTask>();
  private readonly byKey = new Map<string, string>();
  private counter = 0;
  /** Queued one-shot answers for the next creations / reads. */
  readonly nextCreate: Responder<CreateCall>[] = [];
  readonly nextRead: Responder<ReadCall>[] = [];
  onCreate: Responder<CreateCall> | null = null;
  onRead: Responder<ReadCall> | null = null;
  /** Answer 429 concurrent_limit when this many tasks are queued or processing. */
  maxConcurrent: number | null = null;
  /** false: the list endpoint answers a body the relay cannot understand (it must fall back to single reads). */
  listSupported = true;
  /** Usage a new task is given (what its reads report). */
  defaultUsage: FakeTask["usage"] = { points_charged: 20 };
  /** true: list items carry no usage (the reference allows it); only single reads do. */
  usageOnlyOnSingleReads = false;
  /** Upstream ids the unfiltered list leaves out (an upstream whose list order or scope the relay cannot follow). */
  readonly hiddenUnfiltered = new Set<string>();

  constructor(private readonly clock: FakeClock) {}

  handlers() {
    return [
      http.post(`${UPSTREAM_URL}/openapi/v1/:kind/generations`, async ({ request, params }) => {
        const call: CreateCall = {
          type: params.kind === "videos" ? "video" : "image",
          key: request.headers.get("idempotency-key"),
          auth: request.headers.get("authorization"),
          body: (await request.json()) as Record<string, unknown>,
          at: this.clock.now(),
        };
        this.creates.push(call);
        const scripted = this.nextCreate.shift()?.(call) ?? this.onCreate?.(call);
        return scripted ?? this.defaultCreate(call);
      }),
      http.get(`${UPSTREAM_URL}/openapi/v1/tasks`, ({ request }) => {
        const url = new URL(request.url);
        const call: ReadCall = { id: "(list)", at: this.clock.now(), status: url.searchParams.get("status") };
        this.reads.push(call);
        const scripted = this.nextRead.shift()?.(call) ?? this.onRead?.(call);
        return scripted ?? this.defaultList(url);
      }),
      http.get(`${UPSTREAM_URL}/openapi/v1/tasks/:id`, ({ params }) => {
        const call: ReadCall = { id: String(params.id), at: this.clock.now() };
        this.reads.push(call);
        const scripted = this.nextRead.shift()?.(call) ?? this.onRead?.(call);
        return scripted ?? this.defaultRead(call);
      }),
    ];
  }

  running(): number {
    return [...this.tasks.values()].filter((t) => t.status === "queued" || t.status === "processing").length;
  }

  /** A task the upstream holds under an Idempotency-Key, as if an earlier request had created it. */
  seed(task: FakeTask): void {
    this.tasks.set(task.id, task);
    this.byKey.set(task.key, task.id);
  }

  set(id: string, patch: Partial<FakeTask>): void {
    const task = this.tasks.get(id);
    if (!task) throw new Error(`fake upstream has no task ${id}`);
    Object.assign(task, patch);
  }

  /** The upstream task created for a relay task (by its derived Idempotency-Key). */
  taskOf(relayTaskId: string): FakeTask | undefined {
    const id = this.byKey.get(`genrelay-${relayTaskId}`);
    return id ? this.tasks.get(id) : undefined;
  }

  /** Finishes every running task with the given status. */
  finishAll(status: FakeTask["status"] = "succeeded"): void {
    for (const t of this.tasks.values()) if (t.status === "queued" || t.status === "processing") t.status = status;
  }

  body(task: FakeTask) {
    return {
      data: { id: task.id, status: task.status },
      ...(task.output !== undefined ? { output: task.output } : {}),
      ...(task.usage !== undefined ? { usage: task.usage } : {}),
      ...(task.error !== undefined ? { error: task.error } : {}),
    };
  }

  private defaultCreate(call: CreateCall): Response {
    const existing = call.key ? this.byKey.get(call.key) : undefined;
    if (existing) {
      return HttpResponse.json(this.body(this.tasks.get(existing)!), {
        status: 200,
        headers: { Location: `${UPSTREAM_URL}/openapi/v1/tasks/${existing}`, "Idempotent-Replayed": "true" },
      });
    }
    if (this.maxConcurrent !== null && this.running() >= this.maxConcurrent) {
      return upstreamError(429, "concurrent_limit", "Too many running tasks.", `req_cc_${this.creates.length}`);
    }
    this.counter += 1;
    const task: FakeTask = {
      id: `up_${this.counter}`,
      key: call.key ?? "",
      type: call.type,
      status: "queued",
      usage: this.defaultUsage && { ...this.defaultUsage },
      createdAt: call.at,
    };
    this.tasks.set(task.id, task);
    if (call.key) this.byKey.set(call.key, task.id);
    return HttpResponse.json(
      { data: { id: task.id, status: "queued" } },
      {
        status: 201,
        headers: { Location: `${UPSTREAM_URL}/openapi/v1/tasks/${task.id}`, "Idempotent-Replayed": "false" },
      },
    );
  }

  /** Newest first, filtered by status, cursor = the number of items already returned. */
  private defaultList(url: URL): Response {
    if (!this.listSupported) return HttpResponse.json({ unexpected: "shape" });
    const status = url.searchParams.get("status");
    const limit = Number(url.searchParams.get("limit") ?? 20);
    const offset = Number(url.searchParams.get("cursor") ?? 0);
    const all = [...this.tasks.values()]
      .reverse()
      .filter((t) => (status ? t.status === status : !this.hiddenUnfiltered.has(t.id)));
    const page = all.slice(offset, offset + limit);
    return HttpResponse.json({
      data: page.map((t) => {
        const b = this.body(t);
        return { ...b.data, ...b, data: undefined, ...(this.usageOnlyOnSingleReads ? { usage: undefined } : {}) };
      }),
      next_cursor: offset + limit < all.length ? String(offset + limit) : null,
    });
  }

  private defaultRead(call: ReadCall): Response {
    const task = this.tasks.get(call.id);
    if (!task) return upstreamError(404, "task_not_found", "No such task.", `req_nf_${this.reads.length}`);
    return HttpResponse.json(this.body(task));
  }
}
