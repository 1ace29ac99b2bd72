import { expect } from "vitest";
import { STREAMS_PER_CLIENT } from "../../src/services/streams.js";

/** One server-sent event as an EventSource would dispatch it, or a comment line. */
export interface SseEvent {
  id?: string;
  event?: string;
  data: string;
}

/**
 * Reads a text/event-stream response as EventSource parses it (the HTML standard's rules: fields
 * per line, a blank line dispatches, `:` starts a comment). Comments are kept apart, so a test can
 * see keep-alives without them getting in the way of events.
 */
export class SseReader {
  private readonly reader: ReadableStreamDefaultReader<Uint8Array>;
  private readonly decoder = new TextDecoder();
  private buffer = "";
  private readonly ready: SseEvent[] = [];
  readonly comments: string[] = [];
  ended = false;

  constructor(res: Response) {
    if (!res.body) throw new Error("response has no body");
    this.reader = res.body.getReader();
  }

  /** The next event (comments skipped), or null once the stream has ended. */
  async next(): Promise<SseEvent | null> {
    for (;;) {
      const ready = this.ready.shift();
      if (ready) return ready;
      if (this.ended) return null;
      const { value, done } = await this.reader.read();
      if (done) {
        this.ended = true;
        continue;
      }
      this.buffer += this.decoder.decode(value, { stream: true });
      this.parse();
    }
  }

  /** Every event until the stream ends. */
  async rest(): Promise<SseEvent[]> {
    const all: SseEvent[] = [];
    for (let e = await this.next(); e; e = await this.next()) all.push(e);
    return all;
  }

  /** Waits for the next comment line (a keep-alive), reading on. */
  async nextComment(): Promise<string> {
    const seen = this.comments.length;
    while (this.comments.length === seen) {
      const { value, done } = await this.reader.read();
      if (done) throw new Error("stream ended before a comment");
      this.buffer += this.decoder.decode(value, { stream: true });
      this.parse();
    }
    return this.comments[seen]!;
  }

  async cancel(): Promise<void> {
    await this.reader.cancel().catch(() => {});
  }

  private parse(): void {
    for (;;) {
      const end = this.buffer.indexOf("\n\n");
      if (end < 0) return;
      const block = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      const event: SseEvent = { data: "" };
      const data: string[] = [];
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) {
          this.comments.push(line.slice(1).trim());
          continue;
        }
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "data") data.push(value);
        else if (field === "id") event.id = value;
        else if (field === "event") event.event = value;
      }
      if (data.length === 0) continue;
      event.data = data.join("\n");
      this.ready.push(event);
    }
  }
}

/** A refused stream: 429 rate_limit, Retry-After 5, the whole error body. */
export async function expectTooManyStreams(res: Response): Promise<void> {
  expect(res.status).toBe(429);
  expect(res.headers.get("retry-after")).toBe("5");
  expect(await res.json()).toEqual({
    error: {
      code: "rate_limit",
      message: `This API key already holds ${STREAMS_PER_CLIENT} open event streams; close one, or read GET /openapi/v1/events.`,
      request_id: expect.stringMatching(/^req_/),
    },
  });
}
