import { randomUUID } from "node:crypto";
import { Worker } from "node:worker_threads";
import { HeldJsonPieces, type HeldPieces, JsonPieces, JsonText } from "./json-text.js";
import { OUTPUT_PIECE_CHARS, OUTPUT_ROW_MAX_CHARS, outputPieces } from "./output-pieces.js";
import { parseJson } from "./parse.js";
import { BYTES_PER_SLICE, turnBytes } from "../next-turn.js";
import { LOWER_THREAD_PRIORITY } from "../background-thread.js";

/**
 * Large upstream answers parsed off the event loop (docs/contract.md, "Upstream answers"; issue
 * #38 item 7). A 7 MB answer costs 30-50 ms in JSON.parse and as much again in JSON.stringify of its
 * output, and every other request waits behind that. So an answer of OFFLOAD_MIN_CHARS or more is
 * parsed in a worker thread, which hands back the body without its outputs (small: ids, statuses,
 * usage) and each output as JSON text: the main thread parses only the small part, and an output
 * travels as a `JsonText` to the column that stores it as text, never parsed on the main thread.
 *
 * Nor is a long answer decoded or held whole here: its bytes go to the worker (one copy into a
 * buffer that is moved, not cloned), and an output longer than a task row holds comes back as
 * `JsonPieces`, one message per piece of the storage's cut (core/stored-output.ts), each written
 * by a turn of its own. Decoding 7 MB, cloning it both ways and cutting it had cost the event loop
 * about 20 ms in one turn per answer.
 */

/** Answers shorter than this (UTF-16 units) are parsed inline: a worker hop costs more than the parse. */
export const OFFLOAD_MIN_CHARS = 256 * 1024;

/** The key whose values the worker returns as text: a task's output, wherever a body holds one. */
const TEXT_KEY = "output";

export type ParsedJson = { ok: true; value: unknown } | { ok: false };

/**
 * The worker's whole program. It imports nothing of the relay's (an eval'd CommonJS script runs
 * the same under the build and under the test runner; `outputPieces` is handed over as source):
 * decode, parse, then write the body back with each output value replaced by a marker and
 * collected as text. An output longer than the task row holds is cut into the pieces it is stored
 * in, each posted as a message of its own before the answer's last message, so the main thread
 * receives it one piece per turn and never as one string.
 */
const WORKER_SOURCE = `${LOWER_THREAD_PRIORITY}
const { parentPort, workerData } = require("node:worker_threads");
const { mark, key, rowMaxChars, pieceChars } = workerData;
const outputPieces = ${outputPieces.toString()};
/** Long outputs' pieces kept here (hold mode), by key, until moved out as bytes or dropped. */
const held = new Map();
let nextKey = 0;
const encoder = new TextEncoder();
function request(job) {
  const pieces = held.get(job.key);
  if (job.op === "drop") return void held.delete(job.key);
  if (pieces === undefined) return parentPort.postMessage({ rid: job.rid, error: "pieces no longer held" });
  if (job.op === "piece") return parentPort.postMessage({ rid: job.rid, piece: pieces[job.seq] });
  // A buffer of its own (TextEncoder never pools), moved to the main thread, not copied.
  const bytes = encoder.encode(pieces[job.seq]);
  if (job.seq === pieces.length - 1) held.delete(job.key);
  parentPort.postMessage({ rid: job.rid, bytes }, [bytes.buffer]);
}
parentPort.on("message", (job) => {
  if (job.op !== undefined) return request(job);
  let reply;
  try {
    const text = typeof job.text === "string" ? job.text : Buffer.from(job.bytes).toString("utf8");
    const parts = [];
    const skeleton = JSON.stringify(JSON.parse(text), (k, v) => {
      if (k !== key || v === null) return v;
      parts.push(JSON.stringify(v));
      return mark + (parts.length - 1);
    });
    const cut = parts.map((part) => {
      if (part.length <= rowMaxChars) return part;
      const pieces = outputPieces(part, pieceChars);
      if (job.hold) {
        held.set(nextKey, pieces);
        return { pieces: pieces.length, key: nextKey++ };
      }
      for (const piece of pieces) parentPort.postMessage({ id: job.id, piece });
      return { pieces: pieces.length };
    });
    reply = { id: job.id, ok: true, skeleton, parts: cut };
  } catch {
    reply = { id: job.id, ok: false };
  }
  parentPort.postMessage(reply);
});
`;

export interface ParseOptions {
  /**
   * A long output's pieces stay in the worker (HeldJsonPieces), each fetched when it is stored (as
   * UTF-8 bytes moved here, or as text), rather than posted here as they are cut.
   */
  holdLongOutputs?: boolean;
}

/** One message of the worker: a piece of a long output, the answer's end, or the answer to a request about held pieces. */
type Reply =
  | { id: number; piece: string }
  | { id: number; ok: boolean; skeleton?: string; parts?: Array<string | { pieces: number; key?: number }> }
  | { rid: number; piece?: string; bytes?: Uint8Array; error?: string };

/** A request about pieces the worker holds: one piece as text, or as UTF-8 bytes moved here (the last forgets them). */
type HeldRequest = { op: "piece" | "bytes"; key: number; seq: number };

/** An answer's bytes as read (upstream/body.ts): handed to the worker undecoded, decoded here only if it fails. */
export interface AnswerBytes {
  readonly chunks: readonly Uint8Array[];
  readonly size: number;
  readonly text: string;
}

interface Job {
  /** The answer, kept to parse inline if the worker is lost. */
  text: () => string;
  /** The long outputs' pieces received so far, in order. */
  pieces: string[];
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
  /** Requests about held pieces awaiting the worker's answer, by request id. */
  private readonly requests = new Map<
    number,
    { resolve: (reply: { piece?: string; bytes?: Uint8Array }) => void; reject: (e: Error) => void }
  >();
  private nextRid = 0;
  /** Held pieces no longer referenced here are dropped in the worker (a transition that never came). */
  private readonly unreferenced = new FinalizationRegistry<{ worker: Worker; key: number }>(({ worker, key }) => {
    if (worker === this.worker) worker.postMessage({ op: "drop", key });
  });
  /** Prefix of the worker's markers: a NUL and a random id, so no upstream string can pass for one. */
  private readonly mark = `\u0000genrelay-json:${randomUUID()}:`;

  constructor(private readonly minChars = OFFLOAD_MIN_CHARS) {}

  /**
   * The body parsed, as parseJson would (an empty or broken body is not JSON), outputs as JsonText
   * when large, and as JsonPieces when longer than a task row holds. A body given as bytes goes to
   * the worker as one transferred buffer, undecoded (its chunks stay here for the inline fallback).
   */
  parse(body: string | AnswerBytes, options: ParseOptions = {}): Promise<ParsedJson> {
    const text = typeof body === "string" ? () => body : () => body.text;
    if ((typeof body === "string" ? body.length : body.size) < this.minChars) return Promise.resolve(parseJson(text()));
    return new Promise((resolve) => {
      const id = this.nextId++;
      this.pending.set(id, { text, pieces: [], resolve });
      const worker = this.started();
      this.referenced();
      const hold = options.holdLongOutputs === true;
      if (typeof body === "string") worker.postMessage({ id, text: body, hold });
      else void this.sendBytes(worker, id, body, hold);
    });
  }

  /**
   * One copy of the bytes, into a buffer of their own, a slice at a time within the process's bytes
   * a turn (turnBytes; 7 MB in one go was 5-20 ms of a turn), then moved to the worker without
   * another. A worker lost meanwhile has had the job parsed inline (failPending).
   */
  private async sendBytes(worker: Worker, id: number, body: AnswerBytes, hold: boolean): Promise<void> {
    const bytes = new Uint8Array(body.size);
    let at = 0;
    let sinceTurn = 0;
    for (const chunk of body.chunks) {
      bytes.set(chunk, at);
      at += chunk.byteLength;
      sinceTurn += chunk.byteLength;
      if (sinceTurn >= BYTES_PER_SLICE && at < body.size) {
        sinceTurn = 0;
        await turnBytes.take(BYTES_PER_SLICE);
        if (this.worker !== worker || !this.pending.has(id)) return;
      }
    }
    worker.postMessage({ id, bytes, hold }, [bytes.buffer]);
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
    const worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: {
        mark: this.mark,
        key: TEXT_KEY,
        rowMaxChars: OUTPUT_ROW_MAX_CHARS,
        pieceChars: OUTPUT_PIECE_CHARS,
      },
    });
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

  /** Referenced only while it has work: never the reason the process stays up. */
  private referenced(): void {
    if (this.pending.size + this.requests.size > 0) this.worker?.ref();
    else this.worker?.unref();
  }

  /** Asks `worker` about pieces it holds; refused if that worker is gone (the pieces went with it). */
  private ask(worker: Worker, request: HeldRequest): Promise<{ piece?: string; bytes?: Uint8Array }> {
    if (worker !== this.worker) return Promise.reject(new Error("the parse worker holding the pieces has ended"));
    return new Promise((resolve, reject) => {
      const rid = this.nextRid++;
      this.requests.set(rid, { resolve, reject });
      this.referenced();
      worker.postMessage({ ...request, rid });
    });
  }

  /**
   * A long output's pieces held by `worker` under `key`. The worker drops them once the object that
   * reads them is collected: that is the inner HeldPieces, which the transition's patch and the
   * store's write hold while they read (each read's generator refers to it), not the HeldJsonPieces
   * around it, which nothing holds once the patch is made: a GC during the write dropped the pieces
   * under it ("pieces no longer held", the read retried in 2 s; issue #38 item 7, fourteenth round).
   */
  private held(worker: Worker, key: number, count: number): HeldJsonPieces {
    const ask = (request: HeldRequest) => this.ask(worker, request);
    const holder: HeldPieces = {
      count,
      read: async function* () {
        for (let seq = 0; seq < holder.count; seq++) {
          const { piece } = await ask({ op: "piece", key, seq });
          if (piece === undefined) throw new Error(`the parse worker has no piece ${seq}`);
          yield piece;
        }
      },
      bytes: async function* () {
        for (let seq = 0; seq < holder.count; seq++) {
          const { bytes } = await ask({ op: "bytes", key, seq });
          if (bytes === undefined) throw new Error(`the parse worker has no piece ${seq}`);
          yield bytes;
        }
      },
    };
    this.unreferenced.register(holder, { worker, key });
    return new HeldJsonPieces(holder);
  }

  private settle(reply: Reply): void {
    if ("rid" in reply) {
      const request = this.requests.get(reply.rid);
      this.requests.delete(reply.rid);
      this.referenced();
      if (reply.error !== undefined) request?.reject(new Error(`the parse worker: ${reply.error}`));
      else request?.resolve(reply);
      return;
    }
    const job = this.pending.get(reply.id);
    if (job === undefined) return;
    if ("piece" in reply) {
      job.pieces.push(reply.piece);
      return;
    }
    this.pending.delete(reply.id);
    this.referenced();
    if (!reply.ok) {
      job.resolve({ ok: false });
      return;
    }
    let next = 0;
    const worker = this.worker;
    const parts = (reply.parts ?? []).map((part) => {
      if (typeof part === "string") return new JsonText(part);
      if (part.key !== undefined && worker !== null) return this.held(worker, part.key, part.pieces);
      next += part.pieces;
      return new JsonPieces(job.pieces.slice(next - part.pieces, next));
    });
    const mark = this.mark;
    // The skeleton is small: its parse is the only JSON work left on this thread.
    const value = JSON.parse(reply.skeleton ?? "null", (_key, v: unknown) =>
      typeof v === "string" && v.startsWith(mark) ? (parts[Number(v.slice(mark.length))] ?? new JsonText("null")) : v,
    ) as unknown;
    job.resolve({ ok: true, value });
  }

  private failPending(): void {
    const requests = [...this.requests.values()];
    this.requests.clear();
    for (const request of requests) request.reject(new Error("the parse worker holding the pieces has ended"));
    const jobs = [...this.pending.values()];
    this.pending.clear();
    for (const job of jobs) job.resolve(parseJson(job.text()));
  }
}

/** The process's one parser of large answers (one worker thread, started on first use). */
export const offThreadJson = new OffThreadJson();
