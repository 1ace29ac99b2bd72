import fc from "fast-check";
import { afterEach, describe, expect, it, vi } from "vitest";
import { WEBHOOK_BODY_MAX_BYTES } from "../../src/core/body-limit.js";
import { imageBody, relayDialects, relayPerBlock, type DialectRelay, type TestClient } from "../helpers/relay.js";

// A task's stored output is spliced into every answer as its text (issue #38 item 7): never parsed
// and written again on the event loop, so the answer carries exactly the bytes stored, on both drivers.

let t: DialectRelay;
const dialects = relayDialects();
afterEach(() => {
  vi.restoreAllMocks();
});

/** JSON texts that a parse and a stringify would change: escapes, long numbers, exponents, spaces, nesting. */
const oddJson: fc.Arbitrary<string> = fc.letrec<{ value: string }>((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.constantFrom(
      "12345678901234567890123",
      "-0",
      "1E+2",
      "0.1000000000000000055511151231257827",
      "1e400",
      '"\\u00e9\\ud83d\\ude00\\u0000"',
      '"\\/\\b\\f"',
      '"\\ud800"',
      "true",
      "null",
    ),
    fc.string({ unit: "binary" }).map((s) => JSON.stringify(s)),
    fc.array(tie("value"), { maxLength: 4 }).map((items) => `[${items.join(", ")}]`),
    fc
      .array(fc.tuple(fc.string({ unit: "binary", maxLength: 8 }), tie("value")), { maxLength: 4 })
      .map((entries) => `{ ${entries.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(",")} }`),
  ),
})).value;

/** A task of `client`, ended succeeded with `outputJson` stored as it is. */
async function succeededWith(client: TestClient, outputJson: string, key: string): Promise<string> {
  const res = await t.request(client.apiKey, "/openapi/v1/images/generations", {
    method: "POST",
    idempotencyKey: key,
    json: imageBody(),
  });
  expect(res.status, await res.clone().text()).toBe(201);
  const { data } = (await res.json()) as { data: { id: string } };
  const task = (await t.store.tasks.find(data.id))!;
  const now = t.clock.now();
  await t.store.tasks.transition(
    task,
    { status: "succeeded", phase: "done", outputJson, completedAt: now },
    { now, token: null, firstAttemptDelayMs: 0 },
  );
  return data.id;
}

/** The answer's text, which must hold the stored output byte for byte, between its neighbours. */
async function answerText(client: TestClient, path: string, init: RequestInit = {}): Promise<string> {
  const res = await t.request(client.apiKey, path, init);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^application\/json/);
  return res.text();
}

describe.each(dialects)("stored outputs in answers on %s", (_name, open) => {
  relayPerBlock(open, (r) => {
    t = r;
  });

  it("the task read carries the stored text exactly, whatever JSON it is (fast-check)", async () => {
    const client = await t.client("odd-json");
    let n = 0;
    await fc.assert(
      fc.asyncProperty(oddJson, async (outputJson) => {
        const id = await succeededWith(client, outputJson, `odd-key-${n++}`);
        const text = await answerText(client, `/openapi/v1/tasks/${id}`);
        expect(text).toContain(`},"output":${outputJson},"usage":{`);
        // The answer is still one JSON document.
        expect(() => JSON.parse(text)).not.toThrow();
      }),
      { numRuns: 40 },
    );
  });

  it("no read path parses the stored output: read, Prefer: wait, creation replay, list", async () => {
    const client = await t.client("no-parse");
    // Small enough for a list item and a webhook body, odd enough that a parse and stringify would show.
    const small = '{"n":12345678901234567890123,"s":"\\u00e9"}';
    const big = `{"images":[${Array.from({ length: 3000 }, (_, i) => `{"url":"https://cdn.example.com/${i}.png"}`).join(",")}]}`;
    expect(big.length).toBeGreaterThan(WEBHOOK_BODY_MAX_BYTES / 3);
    const smallId = await succeededWith(client, small, "np-small-key");
    const bigId = await succeededWith(client, big, "np-big-key");
    const parse = vi.spyOn(JSON, "parse");
    const parsedOutput = () => parse.mock.calls.filter(([text]) => text === small || text === big).length;

    for (const [id, output] of [
      [smallId, small],
      [bigId, big],
    ] as const) {
      expect(await answerText(client, `/openapi/v1/tasks/${id}`)).toContain(`"output":${output},`);
      expect(
        await answerText(client, `/openapi/v1/tasks/${id}?status=queued`, { headers: { Prefer: "wait=5" } }),
      ).toContain(`"output":${output},`);
    }
    const replay = await t.request(client.apiKey, "/openapi/v1/images/generations", {
      method: "POST",
      idempotencyKey: "np-big-key",
      json: imageBody(),
    });
    expect(replay.status).toBe(200);
    expect(await replay.text()).toContain(`"output":${big},`);
    const list = await answerText(client, "/openapi/v1/tasks?limit=10");
    expect(list).toContain(`"output":${small},`);
    expect(list).toContain(`"output":${big},`);
    expect(parsedOutput()).toBe(0);
  });
});
