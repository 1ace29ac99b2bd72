import { randomUUID } from "node:crypto";
import { Worker } from "node:worker_threads";
import { JsonText } from "./json-text.js";
import { parseJson } from "./parse.js";

/**
 * Large upstream answers parsed off the event loop (docs/contract.md, "Upstream answers"; issue
 * #38 item 7). A 7 MB answer costs 30-50 ms in JSON.parse and as much again in JSON.stringify of its
 * output, and every other request waits behind that. So an answer of OFFLOAD_MIN_CHARS or more is
 * parsed in a worker thread, which hands back the body without its outputs (small: ids, statuses,
 * usage) and each output as JSON text: the main thread parses only the small part, and an output
 * travels as a `JsonText` to the column that stores it as text, never parsed on the main thread.
 */

/** Answers shorter than this (UTF-16 units) are parsed inline: a worker hop costs more than the parse. */
export const OFFLOAD_MIN_CHARS = 256 * 1024;

/** The key whose values the worker returns as text: a task's output, wherever a body holds one. */
const TEXT_KEY = "output";

export type ParsedJson = { ok: true; value: unknown } | { ok: false };

/**
 * The worker's whole program. It imports nothing of the relay's (an eval'd CommonJS script runs
 * the same under the build and under the test runner): parse, then write the body back with each
 * output value replaced by a marker and collected as text.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const { mark, key } = workerData;
parentPort.on("message", (job) => {
  let reply;
  try {
    const parts = [];
    const skeleton = JSON.stringify(JSON.parse(job.text), (k, v) => {
      if (k !== key || v === null) return v;
      parts.push(JSON.stringify(v));
      return mark + (parts.length - 1);
    });
    reply = { id: job.id, ok: true, skeleton, parts };
  } catch {
    reply = { id: job.id, ok: false };
  }
  parentPort.postMessage(reply);
});
`;

interface Reply {
  id: number;
  ok: boolean;
  skeleton?: string;
  parts?: string[];
}

interface Job {
  text: string;
  resolve: (parsed: ParsedJson) => void;
}

/**
 * One worker thread, started at the first large answer and kept (referenced only while it has
 * work, so it never holds a process open). A worker that fails or exits takes nothing with it: its
 * pending answers are parsed inline (slower, still right), and the next large answer starts a new one.
 */
export class OffThreadJson {
  private worker: Worker | null = null;
  private readonly pending = new Map<number, Job>();
  private nextId = 0;
  /** Prefix of the worker's markers: a NUL and a random id, so no upstream string can pass for one. */
  private readonly mark = `\u0000genrelay-json:${randomUUID()}:`;

  constructor(private readonly minChars = OFFLOAD_MIN_CHARS) {}

  /** The body parsed, as parseJson would (an empty or broken body is not JSON), outputs as JsonText when large. */
  parse(text: string): Promise<ParsedJson> {
    if (text.length < this.minChars) return Promise.resolve(parseJson(text));
    return new Promise((resolve) => {
      const id = this.nextId++;
      this.pending.set(id, { text, resolve });
      const worker = this.started();
      if (this.pending.size === 1) worker.ref();
      worker.postMessage({ id, text });
    });
  }

  /** Ends the worker; pending answers are parsed inline. */
  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = null;
    this.failPending();
    await worker?.terminate();
  }

  private started(): Worker {
    if (this.worker !== null) return this.worker;
    const worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { mark: this.mark, key: TEXT_KEY } });
    worker.unref();
    worker.on("message", (reply: Reply) => this.settle(reply));
    const lost = () => {
      if (this.worker !== worker) return;
      this.worker = null;
      this.failPending();
    };
    worker.on("error", lost);
    worker.on("exit", lost);
    this.worker = worker;
    return worker;
  }

  private settle(reply: Reply): void {
    const job = this.pending.get(reply.id);
    if (job === undefined) return;
    this.pending.delete(reply.id);
    if (this.pending.size === 0) this.worker?.unref();
    if (!reply.ok) {
      job.resolve({ ok: false });
      return;
    }
    const parts = reply.parts ?? [];
    const mark = this.mark;
    // The skeleton is small: its parse is the only JSON work left on this thread.
    const value = JSON.parse(reply.skeleton ?? "null", (_key, v: unknown) =>
      typeof v === "string" && v.startsWith(mark) ? new JsonText(parts[Number(v.slice(mark.length))] ?? "null") : v,
    ) as unknown;
    job.resolve({ ok: true, value });
  }

  private failPending(): void {
    const jobs = [...this.pending.values()];
    this.pending.clear();
    for (const job of jobs) job.resolve(parseJson(job.text));
  }
}

/** The process's one parser of large answers (one worker thread, started on first use). */
export const offThreadJson = new OffThreadJson();
