import { describe, expect, it } from "vitest";
import { readTask } from "../helpers/flow.js";
import { imageBody } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

/** Replicate's Cancel-After header as another spelling of expires_after_seconds (docs/contract.md, "Creating a task"). */
const suite = upstreamSuite({});

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const FORMAT = "must be a duration such as 90s, 5m or 1h30m (hours, minutes, seconds; 1 s to 7 days)";

describe("Cancel-After on creations", () => {
  it("is expires_after_seconds: the task waiting past it ends canceled (expired); a replay with the other spelling is the same request", async () => {
    const { t, up } = suite.setup();
    const { apiKey } = t.client();
    const create = (headers: Record<string, string>, extra: Record<string, unknown> = {}, key = "cancel-after-1") =>
      t.request(apiKey, "/openapi/v1/images/generations", {
        method: "POST",
        json: imageBody(extra),
        idempotencyKey: key,
        headers,
      });
    const created = await create({ "Cancel-After": "1m30s" });
    expect(created.status).toBe(201);
    const id = ((await created.json()) as Json).data.id as string;
    const replay = await create({}, { expires_after_seconds: 90 });
    expect(replay.status).toBe(200);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect((await create({ "Cancel-After": "90s" }, { expires_after_seconds: 90 })).status).toBe(200);

    t.clock.advance(90_000);
    await t.relay.submitter.runOnce();
    expect(up.creates).toHaveLength(0);
    expect((await readTask(t, apiKey, id)).data.status).toBe("canceled");
    expect((await readTask(t, apiKey, id)).data.error).toMatchObject({ code: "expired" });
  });

  it.each(["soon", "5", "-5s", "0s", "5d", "1.5m", "8h0m1s".replace("8h", "168h"), "m", ""])(
    "Cancel-After: %j is 422 validation_error naming the format, and creates nothing",
    async (value) => {
      const { t } = suite.setup();
      const { apiKey } = t.client();
      const res = await t.request(apiKey, "/openapi/v1/images/generations", {
        method: "POST",
        json: imageBody(),
        idempotencyKey: "cancel-after-bad",
        headers: { "Cancel-After": value },
      });
      expect(res.status).toBe(422);
      expect(await res.json()).toEqual({
        error: {
          code: "validation_error",
          message: `Cancel-After ${FORMAT}.`,
          request_id: expect.stringMatching(/^req_/),
          details: [{ field: "Cancel-After", message: FORMAT }],
        },
      });
      expect(((await (await t.request(apiKey, "/openapi/v1/tasks")).json()) as Json).data).toEqual([]);
    },
  );

  it("both spellings at once must agree", async () => {
    const { t } = suite.setup();
    const { apiKey } = t.client();
    const res = await t.request(apiKey, "/openapi/v1/videos/generations", {
      method: "POST",
      json: { model: "v-video", video_mode: "t2v", prompt: "waves at night", duration: 5, expires_after_seconds: 60 },
      idempotencyKey: "cancel-after-both",
      headers: { "Cancel-After": "5m" },
    });
    expect(res.status).toBe(422);
    const message = "says 300 s while expires_after_seconds says 60: send one of them";
    expect(await res.json()).toEqual({
      error: {
        code: "validation_error",
        message: `Cancel-After ${message}.`,
        request_id: expect.stringMatching(/^req_/),
        details: [{ field: "Cancel-After", message }],
      },
    });
  });
});
