import { http, HttpResponse } from "msw";
import { describe, expect, it } from "vitest";
import { creditPosition } from "../../src/db/sqlite/clients.js";
import { ledger as ledgerOf } from "../../src/db/sqlite/clients.js";
import { ofTask as listTaskEvents } from "../../src/db/sqlite/events.js";
import { createSimulator } from "../../src/simulator/app.js";
import { createTask, readTask, taskRow } from "../helpers/flow.js";
import { upstreamError } from "../helpers/fake-upstream.js";
import { imageBody, UPSTREAM_KEY, UPSTREAM_URL, videoBody, type TestRelay } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

/**
 * The five money findings of issue #10, each reproduced against the fake upstream or the simulator
 * (real price tables, balance and refunds) behind msw, on the relay's fake clock.
 */
const suite = upstreamSuite();
const BALANCE = 1_000_000;

/** A relay whose upstream is the simulator (its prices, charges and refunds), on the relay's clock. */
function withSimulator(env: Record<string, string> = {}) {
  const { t } = suite.setup(env);
  const { app, state } = createSimulator({
    clock: t.clock,
    accounts: [{ apiKey: UPSTREAM_KEY, maxConcurrent: 100, readsPerMinute: 0, balance: BALANCE }],
  });
  suite.server.use(http.all(`${UPSTREAM_URL}/*`, ({ request }) => app.fetch(request)));
  return { t, charged: () => BALANCE - state.balance(UPSTREAM_KEY) };
}

/** Runs the workers on the fake clock until every task of the relay has ended. */
async function runToEnd(t: TestRelay, ids: string[]): Promise<void> {
  for (let i = 0; i < 400 && ids.some((id) => taskRow(t, id).phase !== "done"); i++) {
    await t.relay.submitter.runOnce();
    t.clock.advance(2_000);
    await t.relay.poller.runOnce();
  }
  expect(ids.filter((id) => taskRow(t, id).phase !== "done")).toEqual([]);
}

/** 20 creations at once through the API; returns the statuses and the ids of the accepted. */
async function burst(t: TestRelay, apiKey: string, type: "image" | "video", body: Record<string, unknown>) {
  const responses = await Promise.all(
    Array.from({ length: 20 }, (_, i) =>
      t.request(apiKey, `/openapi/v1/${type}s/generations`, {
        method: "POST",
        json: body,
        idempotencyKey: `burst-${type}-${i}`,
      }),
    ),
  );
  const bodies = (await Promise.all(responses.map((r) => r.json()))) as Array<{
    data?: { id: string };
    error?: { code: string };
  }>;
  return {
    statuses: responses.map((r) => r.status),
    accepted: bodies.filter((b) => b.data).map((b) => b.data!.id),
    errors: bodies.filter((b) => b.error).map((b) => b.error!.code),
  };
}

describe("credit limit: a budget that holds under a burst of 20 concurrent creations", () => {
  it("images, price known from the published table: 402 at once for what cannot fit; charges ≤ limit", async () => {
    const { t, charged } = withSimulator();
    const { apiKey, id } = t.client("capped", { creditLimit: 100 });
    const { statuses, accepted, errors } = await burst(t, apiKey, "image", imageBody({ quality: "low", size: "1K" }));
    // 20 points each: five fit, fifteen are refused before anything is stored or sent.
    expect(statuses.filter((s) => s === 201)).toHaveLength(5);
    expect(errors).toEqual(Array(15).fill("insufficient_points"));
    expect(creditPosition(t.database.db, id)).toMatchObject({ charged: 0, reserved: 100 });
    await runToEnd(t, accepted);
    expect(charged()).toBe(100);
    expect(creditPosition(t.database.db, id)).toMatchObject({ charged: 100, refunded: 0, reserved: 0 });
  });

  it("images, price unknown: accepted, one goes first, its charge teaches the price, the rest fit or end failed uncharged", async () => {
    const { t, charged } = withSimulator();
    const { apiKey, id } = t.client("capped", { creditLimit: 100 });
    // flux-lite is in no table the relay knows (the simulator charges 20).
    const { accepted } = await burst(t, apiKey, "image", imageBody({ model: "flux-lite" }));
    expect(accepted).toHaveLength(20);
    await runToEnd(t, accepted);
    expect(charged()).toBeLessThanOrEqual(100);
    expect(charged()).toBe(100);
    const rows = accepted.map((a) => taskRow(t, a));
    expect(rows.filter((r) => r.status === "succeeded")).toHaveLength(5);
    const refused = rows.filter((r) => r.status === "failed");
    expect(refused).toHaveLength(15);
    for (const r of refused) {
      expect(JSON.parse(r.errorJson!)).toMatchObject({ code: "insufficient_points" });
      expect(r).toMatchObject({ submitAttempts: 0, upstreamTaskId: null, pointsCharged: 0 });
    }
    expect(creditPosition(t.database.db, id)).toMatchObject({ charged: 100, reserved: 0 });
  });

  it("videos, price known (500 for a 5 s 480p v-video): two of twenty under a 1,000 limit", async () => {
    const { t, charged } = withSimulator();
    const { apiKey } = t.client("capped", { creditLimit: 1_000 });
    const { accepted, errors } = await burst(t, apiKey, "video", videoBody({ resolution: "480p" }));
    expect(accepted).toHaveLength(2);
    expect(errors).toEqual(Array(18).fill("insufficient_points"));
    await runToEnd(t, accepted);
    expect(charged()).toBe(1_000);
  });

  it("videos, price unknown (v-video-pro 1080p, 1,000 each): the limit of 2,500 is never overspent", async () => {
    const { t, charged } = withSimulator();
    const { apiKey, id } = t.client("capped", { creditLimit: 2_500 });
    const { accepted } = await burst(
      t,
      apiKey,
      "video",
      videoBody({ model: "v-video-pro", resolution: "1080p", video_mode: "t2v" }),
    );
    expect(accepted).toHaveLength(20);
    await runToEnd(t, accepted);
    expect(charged()).toBe(2_000);
    expect(creditPosition(t.database.db, id)).toMatchObject({ charged: 2_000, reserved: 0 });
  });

  it("three videos under a limit of 100: refused at intake, nothing spent (was spent=1500/100)", async () => {
    const { t, charged } = withSimulator();
    const { apiKey } = t.client("capped", { creditLimit: 100 });
    for (let i = 0; i < 3; i++) {
      const res = await t.request(apiKey, "/openapi/v1/videos/generations", {
        method: "POST",
        json: videoBody({ resolution: "480p" }),
        idempotencyKey: `video-${i}-key`,
      });
      expect(res.status).toBe(402);
      const body = (await res.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe("insufficient_points");
      expect(body.error.message).toBe(
        "This task costs 500 points and does not fit your credit limit on this relay (0 charged and 0 reserved of a limit of 100).",
      );
    }
    expect(charged()).toBe(0);
  });

  it("spend survives retention pruning: the ledger, not the task rows, holds it", async () => {
    const { t } = withSimulator({ TASK_RETENTION_DAYS: "1" });
    const { apiKey, id } = t.client("capped", { creditLimit: 40 });
    const first = await createTask(t, apiKey, { quality: "low", size: "1K" });
    const second = await createTask(t, apiKey, { quality: "low", size: "1K" });
    await runToEnd(t, [first, second]);
    t.clock.advance(3 * 24 * 60 * 60 * 1000);
    expect(await t.relay.pruner.runOnce()).toBe(2);
    expect(creditPosition(t.database.db, id)).toMatchObject({ charged: 40 });
    expect(ledgerOf(t.database.db, id).map((e) => e.charged)).toEqual([20, 20]);
    const res = await t.request(apiKey, "/openapi/v1/images/generations", {
      method: "POST",
      json: imageBody({ quality: "low", size: "1K" }),
      idempotencyKey: "after-pruning",
    });
    expect(res.status).toBe(402);
    const usage = (await (await t.request(apiKey, "/openapi/v1/usage")).json()) as { data: Record<string, unknown> };
    expect(usage.data).toMatchObject({
      points_charged: 40,
      points_refunded: 0,
      points_reserved: 0,
      points_spent: 40,
      credit_limit: 40,
    });
  });

  it("lowering the limit takes effect for waiting tasks: one that no longer fits ends failed, never submitted", async () => {
    const { t, charged } = withSimulator();
    const { apiKey, id } = t.client("capped", { creditLimit: 100 });
    const a = await createTask(t, apiKey, { quality: "low", size: "1K" });
    const b = await createTask(t, apiKey, { quality: "low", size: "1K" });
    const { updateClientLimits } = await import("../../src/services/clients.js");
    await updateClientLimits(t.relay.deps, id, { creditLimit: 20 });
    await runToEnd(t, [a, b]);
    expect([taskRow(t, a).status, taskRow(t, b).status]).toEqual(["succeeded", "failed"]);
    expect(JSON.parse(taskRow(t, b).errorJson!).code).toBe("insufficient_points");
    expect(charged()).toBe(20);
  });
});

describe("catalog-aware intake: what the upstream would refuse is refused before it is stored", () => {
  async function warmCatalog(t: TestRelay, apiKey: string) {
    expect((await t.request(apiKey, "/openapi/v1/models")).status).toBe(200);
  }

  it("unknown model and unsupported video_mode: 422 naming the field; nothing stored, nothing sent", async () => {
    const { t } = withSimulator();
    const { apiKey } = t.client();
    await warmCatalog(t, apiKey);
    const unknown = await t.request(apiKey, "/openapi/v1/images/generations", {
      method: "POST",
      json: imageBody({ model: "no-such-model" }),
      idempotencyKey: "unknown-model",
    });
    expect(unknown.status).toBe(422);
    const body = (await unknown.json()) as {
      error: { code: string; details: Array<{ field: string; message: string }> };
    };
    expect(body.error.code).toBe("validation_error");
    expect(body.error.details).toEqual([
      { field: "model", message: "is not a image model in the upstream's catalog; one of: p-image, flux-lite" },
    ]);
    const mode = await t.request(apiKey, "/openapi/v1/videos/generations", {
      method: "POST",
      json: videoBody({ video_mode: "zzz" }),
      idempotencyKey: "bad-video-mode",
    });
    expect(mode.status).toBe(422);
    expect(((await mode.json()) as { error: { details: unknown } }).error.details).toEqual([
      { field: "video_mode", message: "is not supported by v-video; one of: t2v, i2v_first, i2v_last, multimodal_ref" },
    ]);
    const list = (await (await t.request(apiKey, "/openapi/v1/tasks")).json()) as { data: unknown[] };
    expect(list.data).toEqual([]);
  });

  it("several unsupported parameters are all named", async () => {
    const { t } = withSimulator();
    const { apiKey } = t.client();
    await warmCatalog(t, apiKey);
    const res = await t.request(apiKey, "/openapi/v1/videos/generations", {
      method: "POST",
      json: videoBody({ duration: 7, resolution: "4k" }),
      idempotencyKey: "bad-video-params",
    });
    expect(res.status).toBe(422);
    const fields = ((await res.json()) as { error: { details: Array<{ field: string }> } }).error.details.map(
      (d) => d.field,
    );
    expect(fields.sort()).toEqual(["duration", "resolution"]);
  });

  it("with no catalog cached yet the request is accepted and the upstream decides, its details kept on the task", async () => {
    const { t, up } = suite.setup();
    const { apiKey } = t.client();
    up.onCreate = () =>
      HttpResponse.json(
        {
          error: {
            code: "validation_error",
            message: "video_mode is not supported",
            request_id: "req_422",
            details: [{ field: "video_mode", reason: "unsupported" }],
          },
        },
        { status: 422 },
      );
    const id = await createTask(t, apiKey, { video_mode: "zzz" }, { type: "video" });
    await t.relay.submitter.runOnce();
    const view = await readTask(t, apiKey, id);
    expect(view.data.error).toEqual({
      code: "validation_error",
      message: "video_mode is not supported",
      request_id: "req_422",
      details: [{ field: "video_mode", reason: "unsupported" }],
    });
  });
});

describe("a task the upstream may have charged is never ended by a transient condition", () => {
  it("an HTML 404 from a proxy for 20 seconds does not write off in-flight videos; they finish charged", async () => {
    const { t, up } = suite.setup();
    const { apiKey } = t.client();
    const ids = [
      await createTask(t, apiKey, {}, { type: "video" }),
      await createTask(t, apiKey, {}, { type: "video" }),
    ];
    await t.relay.submitter.runOnce();
    up.onRead = () =>
      new HttpResponse("<html><body><h1>404 Not Found</h1><hr>nginx</body></html>", {
        status: 404,
        headers: { "Content-Type": "text/html" },
      });
    for (let i = 0; i < 10; i++) {
      t.clock.advance(2_000);
      await t.relay.poller.runOnce();
    }
    expect(up.reads.length).toBeGreaterThanOrEqual(4);
    expect(ids.map((id) => taskRow(t, id).phase)).toEqual(["submitted", "submitted"]);
    up.onRead = null;
    up.finishAll("succeeded");
    for (let i = 0; i < 40 && ids.some((id) => taskRow(t, id).phase !== "done"); i++) {
      t.clock.advance(10_000);
      await t.relay.poller.runOnce();
    }
    for (const id of ids) {
      const view = await readTask(t, apiKey, id);
      expect(view.data.status).toBe("succeeded");
      expect(view.usage.points_charged).toBe(20);
    }
  });

  it("empty 404s, 5xx and malformed bodies are retried, not ended", async () => {
    const { t, up } = suite.setup();
    const { apiKey } = t.client();
    const id = await createTask(t, apiKey);
    await t.relay.submitter.runOnce();
    const answers = [
      () => new HttpResponse(null, { status: 404 }),
      () => upstreamError(503, "service_unavailable", "down", "req_503"),
      () => new HttpResponse("{not json", { status: 200, headers: { "Content-Type": "application/json" } }),
      () => new HttpResponse(null, { status: 404 }),
    ];
    up.nextRead.push(...answers);
    for (let i = 0; i < 4; i++) {
      t.clock.advance(70_000);
      await t.relay.poller.runOnce();
    }
    expect(up.reads).toHaveLength(4);
    expect(taskRow(t, id).phase).toBe("submitted");
  });

  it("a dropped first attempt, then 409 'still being created': retried with the same key until the replay returns the charged task", async () => {
    const { t, up } = suite.setup();
    const { apiKey } = t.client();
    const id = await createTask(t, apiKey);
    // The first attempt reached the upstream (which created and charged the task), but the connection dropped.
    up.nextCreate.push(() => {
      up.seed({
        id: "up_orig",
        key: `genrelay-${id}`,
        type: "image",
        status: "processing",
        usage: { points_charged: 40 },
        createdAt: t.clock.now(),
      });
      return HttpResponse.error();
    });
    // Then network failures and 409s mixed, more than the 3 tries that used to end it failed.
    const conflict = () =>
      upstreamError(409, "idempotency_key_reused", "The original request is still being processed.", "req_409");
    up.nextCreate.push(() => HttpResponse.error(), conflict, conflict, conflict, conflict, conflict, conflict);
    for (let i = 0; i < 30 && taskRow(t, id).phase === "waiting"; i++) {
      await t.relay.submitter.runOnce();
      t.clock.advance(30_000);
    }
    expect(new Set(up.creates.map((c) => c.key))).toEqual(new Set([`genrelay-${id}`]));
    expect(up.creates.length).toBe(9);
    expect(taskRow(t, id)).toMatchObject({ phase: "submitted", upstreamTaskId: "up_orig" });
    t.clock.advance(5_000);
    await t.relay.poller.runOnce();
    expect((await readTask(t, apiKey, id)).usage.points_charged).toBe(40);
  });
});

describe("revoking a client stops its spending", () => {
  it("its queued tasks end canceled with task.canceled events and are never submitted (was: 5 submitted and charged)", async () => {
    const { t, up } = suite.setup();
    const { apiKey, id: clientId } = t.client();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await createTask(t, apiKey, { callback_url: "http://127.0.0.1:9/hook" }));
    const { revokeClient } = await import("../../src/services/clients.js");
    expect((await revokeClient(t.relay.deps, clientId))?.canceled).toBe(5);
    await t.relay.submitter.runOnce();
    expect(up.creates).toHaveLength(0);
    for (const id of ids) {
      expect(taskRow(t, id)).toMatchObject({ status: "canceled", phase: "done", pointsCharged: 0 });
      expect(JSON.parse(taskRow(t, id).errorJson!).code).toBe("client_revoked");
      expect(listTaskEvents(t.database.db, id).map((e) => e.type)).toEqual(["task.canceled"]);
    }
    expect((await t.request(apiKey, "/openapi/v1/tasks")).status).toBe(401);
  });

  it("a task claimed for submission when the key is revoked is canceled by the submitter, not sent", async () => {
    const { t, up } = suite.setup();
    const { apiKey, id: clientId } = t.client();
    const id = await createTask(t, apiKey);
    // Revoked between the claim and the upstream call: the submission's own transaction sees it.
    const { update: updateClient } = await import("../../src/db/sqlite/clients.js");
    const original = t.relay.lifecycle.beginSubmission.bind(t.relay.lifecycle);
    t.relay.lifecycle.beginSubmission = (task, token, decide, until) => {
      updateClient(t.database.db, clientId, { revokedAt: t.clock.now() });
      return original(task, token, decide, until);
    };
    await t.relay.submitter.runOnce();
    expect(up.creates).toHaveLength(0);
    expect(taskRow(t, id)).toMatchObject({ status: "canceled", submitAttempts: 0 });
  });
});

describe("operators stop spending from the CLI", () => {
  async function cli(t: TestRelay, argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
    const { runCli } = await import("../../src/cli/run.js");
    const { vi } = await import("vitest");
    let stdout = "";
    let stderr = "";
    const o = vi.spyOn(process.stdout, "write").mockImplementation((chunk) => ((stdout += String(chunk)), true));
    const e = vi.spyOn(process.stderr, "write").mockImplementation((chunk) => ((stderr += String(chunk)), true));
    try {
      const code = await runCli(argv, {
        DATABASE_PATH: t.config.databasePath,
        UPSTREAM_BASE_URL: UPSTREAM_URL,
        UPSTREAM_API_KEY: UPSTREAM_KEY,
      });
      return { code, stdout, stderr };
    } finally {
      o.mockRestore();
      e.mockRestore();
    }
  }

  it("tasks cancel ends any client's unsubmitted task canceled; a submitted one is refused with exit 1", async () => {
    const { t, up } = suite.setup();
    const { apiKey } = t.client();
    const waiting = await createTask(t, apiKey);
    const ok = await cli(t, ["tasks", "cancel", waiting]);
    expect(ok).toMatchObject({ code: 0, stdout: expect.stringContaining(`canceled ${waiting}`) as unknown });
    expect(taskRow(t, waiting)).toMatchObject({ status: "canceled", phase: "done" });
    const running = await createTask(t, apiKey);
    await t.relay.submitter.runOnce();
    expect(up.creates).toHaveLength(1);
    const refused = await cli(t, ["tasks", "cancel", running]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`cannot cancel ${running}: The task was already submitted upstream`);
    expect((await cli(t, ["tasks", "cancel", "task_nope"])).stderr).toContain("no task task_nope");
  });

  it("clients revoke reports the tasks it canceled; clients list shows charged, reserved and the limit", async () => {
    const { t } = suite.setup();
    const { apiKey, id } = t.client("spender", { creditLimit: 500 });
    await createTask(t, apiKey, { quality: "low", size: "1K" });
    await createTask(t, apiKey, { quality: "low", size: "1K" });
    const listed = await cli(t, ["clients", "list", "--json"]);
    expect(JSON.parse(listed.stdout)).toEqual([
      expect.objectContaining({ id, points_charged: 0, points_reserved: 40, points_spent: 0, credit_limit: 500 }),
    ]);
    const revoked = await cli(t, ["clients", "revoke", id]);
    expect(revoked).toMatchObject({ code: 0 });
    expect(revoked.stdout).toContain("2 task(s) not yet submitted were canceled");
    expect(JSON.parse((await cli(t, ["clients", "list", "--json"])).stdout)[0]).toMatchObject({
      status: "revoked",
      points_reserved: 0,
    });
  });
});
