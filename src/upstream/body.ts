import { RateWatch, type DeadlineError, type MinRate } from "../net/deadline.js";
import { BYTES_PER_SLICE, turnBytes } from "../next-turn.js";
import type { TransportResponse } from "./transport.js";

/** Default for UPSTREAM_MAX_BODY_BYTES (docs/contract.md, "Upstream answers"). */
export const DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024;
/** An error answer is read only this far: its code and message are at the start, the rest is noise. */
export const ERROR_BODY_BYTES = 64 * 1024;

/**
 * A body as read: its bytes as they arrived, decoded only when someone reads `text`. A large task
 * answer goes to the parse worker as bytes (upstream/json-offload.ts) and is never decoded here.
 */
export class LimitedBody {
  private decoded: string | null = null;

  constructor(
    readonly chunks: readonly Uint8Array[],
    /** Bytes in `chunks`. */
    readonly size: number,
    /** The body was longer than the limit: `text` holds only its start, the rest was never read. */
    readonly truncated: boolean,
  ) {}

  get text(): string {
    this.decoded ??= Buffer.concat(this.chunks, this.size).toString("utf8");
    return this.decoded;
  }
}

/**
 * Reads a response body through the transport (transport.ts), at most `max` bytes of it. Memory
 * stays bounded by `max` whatever the upstream sends: a declared Content-Length over the limit is refused before a byte is read,
 * and a body that streams past it is cancelled (the connection closed) as soon as it does. With
 * `rate`, a body that arrives below it is reported to `onSlow` (the caller ends the call). A large
 * body is read a slice (BYTES_PER_SLICE) at a time within the process's bytes a turn (turnBytes),
 * other work served in between: a 7 MB answer already in the socket's buffers is otherwise pulled
 * through the stream in one turn.
 */
export async function readLimited(
  response: TransportResponse,
  max: number,
  rate?: { rate: MinRate; what: string; onSlow: (err: DeadlineError) => void },
): Promise<LimitedBody> {
  const declared = Number(response.headers.get("content-length") ?? "");
  if (Number.isFinite(declared) && declared > max) {
    response.cancel();
    return new LimitedBody([], 0, true);
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  let truncated = false;
  let sinceTurn = 0;
  // Nothing else reads this body: whenever it is slow, the sender is.
  const watch = rate ? new RateWatch(rate.rate, { what: rate.what, onSlow: rate.onSlow }) : null;
  try {
    for (;;) {
      const value = await response.read();
      if (value === null) break;
      watch?.add(value.byteLength);
      if (size + value.byteLength > max) {
        chunks.push(value.subarray(0, max - size));
        size = max;
        truncated = true;
        response.cancel();
        break;
      }
      chunks.push(value);
      size += value.byteLength;
      sinceTurn += value.byteLength;
      if (sinceTurn >= BYTES_PER_SLICE) {
        sinceTurn = 0;
        await turnBytes.take(BYTES_PER_SLICE);
      }
    }
  } finally {
    watch?.stop();
  }
  return new LimitedBody(chunks, size, truncated);
}
