import { describe, expect, it } from "vitest";
import { BYTES_PER_TURN } from "../../src/next-turn.js";
import { readLimited } from "../../src/upstream/body.js";
import { fetchResponse, type TransportResponse } from "../../src/upstream/transport.js";

/** A response whose whole body is already buffered: `count` chunks of `size` bytes. */
function buffered(count: number, size: number): TransportResponse {
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      for (let i = 0; i < count; i++) controller.enqueue(new Uint8Array(size).fill(97 + (i % 26)));
      controller.close();
    },
  });
  return fetchResponse(new Response(stream));
}

describe("readLimited (issue #38 item 7)", () => {
  it("reads a large body already buffered over several turns: other work runs in between", async () => {
    const chunk = 64 * 1024;
    const count = Math.ceil((3 * BYTES_PER_TURN) / chunk);
    let turns = 0;
    let done = false;
    const tick = () => {
      turns++;
      if (!done) setImmediate(tick);
    };
    setImmediate(tick);
    const body = await readLimited(buffered(count, chunk), 8 * 1024 * 1024);
    done = true;
    expect(body.size).toBe(count * chunk);
    expect(body.truncated).toBe(false);
    // 3 MiB at BYTES_PER_TURN a turn: the reading yielded at least twice (none when read in one go).
    expect(turns).toBeGreaterThanOrEqual(2);
    expect(Buffer.concat(body.chunks).subarray(chunk, chunk + 1)[0]).toBe(98);
  });

  it("a small body is read without yielding, and the limit still truncates a large one", async () => {
    let turns = 0;
    setImmediate(() => turns++);
    const small = await readLimited(buffered(4, 1024), 8 * 1024 * 1024);
    expect(turns).toBe(0);
    expect(small.size).toBe(4096);
    const cut = await readLimited(buffered(64, 64 * 1024), 2 * BYTES_PER_TURN + 10);
    expect(cut.truncated).toBe(true);
    expect(cut.size).toBe(2 * BYTES_PER_TURN + 10);
  });
});
