import { describe, expect, it, vi } from "vitest";
import { WEBHOOK_BODY_MAX_BYTES } from "../../src/core/body-limit.js";
import { ORPHAN_OUTPUT_AGE_MS, OUTPUT_PIECE_CHARS, OUTPUT_ROW_MAX_CHARS } from "../../src/core/stored-output.js";
import { OutputMissingError } from "../../src/store/store.js";
import { createTask, storedTask } from "../helpers/flow.js";
import type { FakeUpstream } from "../helpers/fake-upstream.js";
import { verifyAt } from "../helpers/receiver.js";
import { imageBody, type DialectRelay } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

// Issue #38 item 7: an output longer than OUTPUT_ROW_MAX_CHARS is kept out of the task row, in
// pieces written before the transition that refers to them. Every answer still carries it byte
// for byte; the row the workers read stays small; a writer killed between pieces and transition
// leaves an orphan that no read shows and the pruner sweeps.

const { dialects, receiver } = upstreamSuite();

/**
 * An output of about 0.9 M UTF-16 units whose text has what a careless split or a parse and
 * stringify would change: surrogate pairs straddling every piece boundary ("x" first puts each
 * high surrogate on an odd index, as every boundary is), escapes, a number beyond double precision
 * is not possible in a parsed value, so the text is JSON.stringify's, as the relay stores it.
 */
function bigOutput() {
  return {
    s: `x${"😀".repeat(4 * OUTPUT_PIECE_CHARS)}`,
    quoted: '"\\\u0001\u2028é'.repeat(20_000),
    images: Array.from({ length: 3_000 }, (_, i) => ({ url: `https://cdn.example.com/${i}.png`, seed: i })),
  };
}

/** The task, submitted, then read back succeeded with `output` by one poll; `beforePoll` runs between. */
async function landed(
  t: DialectRelay,
  up: FakeUpstream,
  id: string,
  output: unknown,
  beforePoll: () => void = () => {},
): Promise<void> {
  await t.relay.submitter.runOnce();
  beforePoll();
  up.set(up.taskOf(id)!.id, { status: "succeeded", output, usage: { points_charged: 20, points_refunded: 0 } });
  t.clock.advance(2_000);
  await t.relay.poller.runOnce();
}

async function text(t: DialectRelay, apiKey: string, path: string, init: RequestInit = {}) {
  const res = await t.request(apiKey, path, init);
  return { status: res.status, type: res.headers.get("content-type"), body: await res.text() };
}

describe.each(dialects)("outputs kept out of the task row on %s", (_name, setup) => {
  it("a long output's round trip: creation → succeeded → read, wait, replay, list, webhook, byte for byte", async () => {
    const { t, up } = await setup();
    const r = await receiver();
    const client = await t.client();
    const output = bigOutput();
    const stored = JSON.stringify(output);
    expect(stored.length).toBeGreaterThan(OUTPUT_ROW_MAX_CHARS);
    const id = await createTask(t, client.apiKey, { callback_url: r.url() }, { idempotencyKey: "big-round-trip" });
    await landed(t, up, id, output);

    // The row holds a ref, not the text: every read of it by the workers stays small.
    const row = await storedTask(t, id);
    expect(row).toMatchObject({ status: "succeeded", phase: "done", outputJson: null });
    expect(row.outputRef).toMatch(/^out_/);
    let joined = "";
    for await (const piece of t.store.outputs.pieces(row.outputRef!)) {
      expect(piece.length).toBeLessThanOrEqual(OUTPUT_PIECE_CHARS);
      joined += piece;
    }
    expect(joined).toBe(stored);

    const read = await text(t, client.apiKey, `/openapi/v1/tasks/${id}`);
    expect(read.status).toBe(200);
    expect(read.type).toMatch(/^application\/json/);
    expect(read.body).toContain(`},"output":${stored},"usage":{"points_charged":20,"points_refunded":0}}`);
    expect(JSON.parse(read.body).output).toEqual(output);

    const waited = await text(t, client.apiKey, `/openapi/v1/tasks/${id}?status=processing`, {
      headers: { Prefer: "wait=5" },
    });
    expect(waited.body).toBe(read.body);

    const replay = await t.request(client.apiKey, "/openapi/v1/images/generations", {
      method: "POST",
      idempotencyKey: "big-round-trip",
      json: imageBody({ callback_url: r.url() }),
    });
    expect(replay.status).toBe(200);
    expect(await replay.text()).toContain(`"output":${stored},`);

    // A list item and a webhook body are held to 256 KiB: the output is left out, never read for them.
    const read0 = vi.spyOn(t.store.outputs, "pieces");
    const list = JSON.parse((await text(t, client.apiKey, "/openapi/v1/tasks?limit=10")).body);
    expect(list.data).toHaveLength(1);
    expect(list.data[0]).toMatchObject({ id, status: "succeeded", output: null, output_omitted: true });
    await t.relay.dispatcher.runOnce();
    expect(r.requests).toHaveLength(1);
    expect(Buffer.byteLength(r.requests[0]!.body)).toBeLessThanOrEqual(WEBHOOK_BODY_MAX_BYTES);
    expect(verifyAt(client.secret, r.requests[0]!, t.clock.now())).toMatchObject({
      type: "task.succeeded",
      data: { id, status: "succeeded", output: null, output_omitted: true, usage: { points_charged: 20 } },
    });
    expect(read0).not.toHaveBeenCalled();
  });

  it("an output at the row's limit stays in the row", async () => {
    const { t, up } = await setup();
    const client = await t.client();
    const output = { s: "y".repeat(OUTPUT_ROW_MAX_CHARS - 8) };
    expect(JSON.stringify(output).length).toBe(OUTPUT_ROW_MAX_CHARS);
    const id = await createTask(t, client.apiKey);
    await landed(t, up, id, output);
    expect(await storedTask(t, id)).toMatchObject({ outputJson: JSON.stringify(output), outputRef: null });
  });

  it("killed between pieces and transition: the task is polled again, the orphan is never shown and is swept", async () => {
    const { t, up } = await setup();
    const client = await t.client();
    const output = bigOutput();
    const id = await createTask(t, client.apiKey);
    const writes = vi.spyOn(t.store.outputs, "write");
    // The pieces are written, then the process "dies" before the transition commits.
    await landed(t, up, id, output, () => {
      vi.spyOn(t.store.tasks, "transition").mockRejectedValueOnce(new Error("killed before the transition"));
    });
    expect(writes).toHaveBeenCalledTimes(1);
    const orphan = writes.mock.calls[0]![0];
    expect(await storedTask(t, id)).toMatchObject({ status: "queued", phase: "submitted", outputRef: null });
    expect(JSON.parse((await text(t, client.apiKey, `/openapi/v1/tasks/${id}`)).body).output).toBeNull();

    // Its lease runs out and the poller reads it again: the output is written anew, under its own ref.
    t.clock.advance(10 * 60_000);
    await t.relay.poller.runOnce();
    const row = await storedTask(t, id);
    expect(row).toMatchObject({ status: "succeeded", phase: "done", outputJson: null });
    expect(row.outputRef).not.toBeNull();
    expect(row.outputRef).not.toBe(orphan);
    expect(JSON.parse((await text(t, client.apiKey, `/openapi/v1/tasks/${id}`)).body).output).toEqual(output);

    // Within the hour the orphan may still be a writer's: kept. After it, swept; the task's pieces stay.
    expect(await t.relay.pruner.runOnce()).toBe(0);
    t.clock.advance(ORPHAN_OUTPUT_AGE_MS);
    expect(await t.relay.pruner.runOnce()).toBe(1);
    await expect(t.store.outputs.pieces(orphan)[Symbol.asyncIterator]().next()).rejects.toThrow(OutputMissingError);
    expect(JSON.parse((await text(t, client.apiKey, `/openapi/v1/tasks/${id}`)).body).output).toEqual(output);
    expect(await t.relay.pruner.runOnce()).toBe(0);
  });
});
