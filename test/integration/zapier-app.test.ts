import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import net from "node:net";
import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { installConnectors } from "../helpers/connectors.js";
import { createImageTask, type LiveRelay, startLiveRelay } from "../helpers/live-relay.js";
import { type Receiver, startReceiver } from "../helpers/receiver.js";
import { catchTestWebhook, relayCall, v1aOfRotation } from "../helpers/v1a-rotation.js";

/** A JSON answer of the relay, as the tests read it. */
const body = async (response: Response): Promise<any> => response.json();
/**
 * The Zapier Platform app in integrations/zapier (docs/contract.md, "Connectors"), run by
 * zapier-platform-core's own app tester against a real relay on loopback, its endpoints API
 * included (the REST hook's endpoint receives the relay's signed webhooks, which perform accepts),
 * and validated with the platform's app schema.
 *
 * zapier-platform-core sends its logs to Zapier only when it has a logging token (LOGGING_TOKEN or
 * one in the event, which the tester never sets), and calls Zapier's RPC only for cursors, stashed
 * files and definition overrides, which the app does not use. The last test checks that no socket
 * left loopback.
 */

// The app's own dependencies live in its own node_modules (scripts/connectors.mjs, npm test's pretest).
installConnectors();
const require = createRequire(new URL("../../integrations/zapier/index.js", import.meta.url));
// No logging token or endpoint: nothing for the core's logger to send anywhere.
for (const name of ["LOGGING_TOKEN", "LOGGING_ENDPOINT", "ZAPIER_BASE_ENDPOINT", "ZAPIER_DEPLOY_KEY"])
  delete process.env[name];
const zapier = require("zapier-platform-core") as {
  version: string;
  createAppTester(app: unknown): (method: unknown, bundle?: Record<string, unknown>) => Promise<any>;
  createAppHandler(app: unknown): (event: Record<string, unknown>) => Promise<{ results: unknown }>;
};
const app = require("./index.js");
const appTester = zapier.createAppTester(app);

/** Every host a socket of this process connected to while these tests ran. */
const connectedTo: string[] = [];
const originalConnect = net.Socket.prototype.connect;

let live: LiveRelay;
let client: { id: string; apiKey: string; secret: string };
let authData: Record<string, string>;

beforeAll(async () => {
  net.Socket.prototype.connect = function (this: net.Socket, ...args: unknown[]) {
    // net.connect() hands its normalized arguments over as one array; a direct call passes them as they are.
    const [first, second] = (Array.isArray(args[0]) ? args[0] : args) as [unknown, unknown];
    const options = typeof first === "object" && first !== null ? (first as net.NetConnectOpts) : undefined;
    const host = options
      ? "path" in options && options.path
        ? `unix:${options.path}`
        : ((options as net.TcpNetConnectOpts).host ?? "localhost")
      : typeof second === "string"
        ? second
        : "localhost";
    connectedTo.push(String(host));
    return (originalConnect as (...a: unknown[]) => net.Socket).apply(this, args);
  } as typeof net.Socket.prototype.connect;
  live = await startLiveRelay();
  client = live.client("zapier");
  authData = { base_url: live.url, api_key: client.apiKey, webhook_secret: client.secret };
}, 60_000);

afterAll(async () => {
  net.Socket.prototype.connect = originalConnect;
  await live?.close();
});

const triggers = app.triggers;
const creates = app.creates;
const taskFinished = triggers.task_finished.operation;

describe("the app's definition", () => {
  it("validates against the platform's app schema (zapier-platform-core's validate command)", async () => {
    const validate = (definition: unknown) => zapier.createAppHandler(definition)({ command: "validate", bundle: {} });
    expect((await validate(app)).results).toEqual([]);
    expect(app.platformVersion).toBe(zapier.version);
    // The same check fails a definition the platform would refuse.
    const broken = {
      ...app,
      triggers: { ...triggers, task_finished: { ...triggers.task_finished, noun: undefined, display: { label: "" } } },
    };
    expect((await validate(broken)).results).not.toEqual([]);
  });

  it("has the trigger and creates the connector promises", () => {
    expect(taskFinished.type).toBe("hook");
    expect(Object.keys(creates).sort()).toEqual(["cancel_task", "create_image_task", "create_video_task"]);
    expect(app.authentication.type).toBe("custom");
    expect(app.authentication.fields.map((f: { key: string }) => f.key)).toEqual([
      "base_url",
      "api_key",
      "webhook_secret",
      "client_id",
    ]);
  });
});

describe("authentication", () => {
  it("its connection test passes with the client's API key and fails with another", async () => {
    await expect(appTester(app.authentication.test, { authData })).resolves.toMatchObject({ data: [] });
    await expect(
      appTester(app.authentication.test, { authData: { ...authData, api_key: "grk_not_a_key" } }),
    ).rejects.toThrow(/invalid_api_key/);
  });

  it("refuses a connection with nothing to verify webhooks with, saying what to add", async () => {
    const bare = { base_url: live.url, api_key: client.apiKey };
    await expect(appTester(app.authentication.test, { authData: bare })).rejects.toThrow(
      /Add the client's Webhook Secret \(whsec_…, for hmac signing\) or its Client ID/,
    );
    await expect(
      appTester(app.authentication.test, { authData: { ...bare, client_id: client.id } }),
    ).resolves.toMatchObject({ data: [] });
  });
});

describe("creates", () => {
  const image = { model: "p-image", prompt: "a lighthouse at dawn", mode: "generate", metadata: { order: "zap-1" } };

  it("Create image task: a new Idempotency-Key on each run, or the user's own", async () => {
    const first = await appTester(creates.create_image_task.operation.perform, { authData, inputData: image });
    expect(first).toMatchObject({
      type: "image",
      status: "queued",
      model: "p-image",
      metadata: { order: "zap-1" },
      output: null,
    });
    expect(first.id).toMatch(/^task_/);
    const second = await appTester(creates.create_image_task.operation.perform, { authData, inputData: image });
    expect(second.id).not.toBe(first.id);

    const keyed = { ...image, idempotency_key: "zap-order-1234" };
    const once = await appTester(creates.create_image_task.operation.perform, { authData, inputData: keyed });
    const replayed = await appTester(creates.create_image_task.operation.perform, { authData, inputData: keyed });
    expect(replayed.id).toBe(once.id);
  });

  it("Create video task", async () => {
    const task = await appTester(creates.create_video_task.operation.perform, {
      authData,
      inputData: { model: "v-video", prompt: "waves at night", video_mode: "t2v", duration: "5", resolution: "720p" },
    });
    expect(task).toMatchObject({ type: "video", status: "queued", model: "v-video" });
  });

  it("a refused creation shows the relay's error", async () => {
    await expect(
      appTester(creates.create_image_task.operation.perform, { authData, inputData: { ...image, prompt: "x" } }),
    ).rejects.toThrow(/validation_error.*\(request req_/);
  });

  it("the Model dropdowns list the catalog's models", async () => {
    expect(await appTester(triggers.image_model.operation.perform, { authData })).toEqual([
      { id: "p-image", name: "P Image" },
      { id: "flux-lite", name: "Flux Lite" },
    ]);
    expect(
      (await appTester(triggers.video_model.operation.perform, { authData })).map((m: { id: string }) => m.id),
    ).toEqual(["v-video", "v-video-pro"]);
  });
});

describe("trigger Task finished", () => {
  let receiver: Receiver;
  beforeAll(async () => {
    receiver = await startReceiver();
  });
  afterAll(async () => receiver?.close());

  it("subscribes the Zap's hook URL through the endpoints API and unsubscribes it", async () => {
    // A client of its own, which never has a task: an endpoint at Zapier's real host must never get
    // an event (another test's task ending while it is subscribed would send one off loopback).
    const own = live.client("zapier-subscribe");
    const authData = { base_url: live.url, api_key: own.apiKey, webhook_secret: own.secret };
    const endpoint = (id: string) =>
      fetch(`${live.url}/openapi/v1/webhooks/endpoints/${id}`, { headers: { Authorization: `Bearer ${own.apiKey}` } });
    const targetUrl = "https://hooks.zapier.com/hooks/standard/123456/abcdef/";
    const subscribeData = await appTester(taskFinished.performSubscribe, {
      authData,
      targetUrl,
      inputData: { events: ["task.succeeded", "task.failed"] },
    });
    expect(subscribeData.id).toMatch(/^ep_/);
    const read = await endpoint(subscribeData.id);
    expect((await body(read)).data).toMatchObject({ url: targetUrl, events: ["task.failed", "task.succeeded"] });

    const all = await appTester(taskFinished.performSubscribe, { authData, targetUrl, inputData: {} });
    expect((await body(await endpoint(all.id))).data.events).toEqual([
      "task.canceled",
      "task.failed",
      "task.succeeded",
    ]);

    await appTester(taskFinished.performUnsubscribe, { authData, subscribeData });
    expect((await endpoint(subscribeData.id)).status).toBe(404);
    // Unsubscribing what is already gone succeeds: turning the Zap off wants it gone.
    await expect(appTester(taskFinished.performUnsubscribe, { authData, subscribeData })).resolves.toEqual({});
    await appTester(taskFinished.performUnsubscribe, { authData, subscribeData: all });
  });

  it("perform fails closed: an unsigned payload is refused, with a secret in the connection or without one", async () => {
    const event = {
      id: "evt_01hook",
      type: "task.succeeded",
      timestamp: "2026-01-01T12:00:00.000Z",
      data: { id: "task_1", status: "succeeded" },
    };
    const bare = { base_url: live.url, api_key: client.apiKey };
    for (const [what, auth, reason] of [
      ["no secret, no client ID", bare, /neither a webhook secret nor a client ID/],
      ["a secret", authData, /no raw body/],
    ] as const) {
      const error = await appTester(taskFinished.perform, {
        authData: auth,
        cleanedRequest: event,
        inputData: {},
      }).catch((e: Error) => e);
      expect((error as Error).name, what).toBe("HaltedError");
      expect((error as Error).message, what).toMatch(reason);
    }
  });

  it("with the webhook secret, perform checks the signature (signed independently with standardwebhooks)", async () => {
    const withSecret = { ...authData, webhook_secret: client.secret };
    const event = {
      id: "evt_01signed",
      type: "task.failed",
      timestamp: new Date().toISOString(),
      data: { id: "task_2", status: "failed" },
    };
    const content = JSON.stringify(event);
    const at = new Date();
    const signed = {
      "Http-Webhook-Id": event.id,
      "Http-Webhook-Timestamp": String(Math.floor(at.getTime() / 1000)),
      "Http-Webhook-Signature": new Webhook(client.secret).sign(event.id, at, content),
    };
    const hook = (headers: Record<string, string>, body = content) => ({
      authData: withSecret,
      inputData: {},
      cleanedRequest: JSON.parse(body),
      rawRequest: { method: "POST", headers, content: body, querystring: "" },
    });

    const lower = Object.fromEntries(
      Object.entries(signed).map(([k, v]) => [k.replace(/^Http-/, "").toLowerCase(), v]),
    );
    // An event the Zap does not listen to starts nothing (and is not remembered as delivered).
    expect(
      await appTester(taskFinished.perform, { ...hook(lower), inputData: { events: ["task.succeeded"] } }),
    ).toEqual([]);
    expect(await appTester(taskFinished.perform, hook(lower))).toEqual([event]);
    // The same webhook again, header spellings aside, is a replay: it verifies, and starts nothing.
    expect(await appTester(taskFinished.perform, hook(signed))).toEqual([]);

    const stale = new Date(Date.now() - 6 * 60 * 1000);
    const refused: Array<[string, ReturnType<typeof hook>]> = [
      ["tampered body", hook(signed, content.replace("failed", "succeeded"))],
      [
        "wrong secret",
        hook({
          ...signed,
          "Http-Webhook-Signature": new Webhook(
            `whsec_${Buffer.from("not this client's secret").toString("base64")}`,
          ).sign(event.id, at, content),
        }),
      ],
      [
        "stale timestamp",
        hook({
          ...signed,
          "Http-Webhook-Timestamp": String(Math.floor(stale.getTime() / 1000)),
          "Http-Webhook-Signature": new Webhook(client.secret).sign(event.id, stale, content),
        }),
      ],
      [
        "no signature",
        hook({ "Http-Webhook-Id": event.id, "Http-Webhook-Timestamp": signed["Http-Webhook-Timestamp"] }),
      ],
    ];
    for (const [what, bundle] of refused) {
      const error = await appTester(taskFinished.perform, bundle).catch((e: Error) => e);
      expect(error, what).toBeInstanceOf(Error);
      expect((error as Error).name, what).toBe("HaltedError");
      expect((error as Error).message, what).toMatch(/signature did not verify/);
    }
  });

  it("performList samples the latest finished tasks from /openapi/v1/events, terminal events only", async () => {
    const delivered = receiver.next();
    const task = await createImageTask(live.url, client.apiKey, "zapier-sample-1", {
      prompt: "a red fox in snow",
      callback_url: receiver.url(),
      callback_events: ["task.processing", "task.succeeded"],
    });
    // task.processing is delivered first, then task.succeeded: wait for the terminal one.
    await delivered;
    const finished = () =>
      receiver.requests.find((r) => r.json.type === "task.succeeded" && r.json.data.id === task.id);
    while (!finished()) await receiver.next();
    const webhook = finished()!;

    const samples = await appTester(taskFinished.performList, { authData, inputData: {} });
    expect(samples[0]).toEqual({
      id: webhook.headers["webhook-id"],
      type: "task.succeeded",
      timestamp: webhook.json.timestamp,
      data: webhook.json.data,
    });
    expect(samples[0].data.id).toBe(task.id);
    expect(
      samples.every((s: { type: string }) => ["task.succeeded", "task.failed", "task.canceled"].includes(s.type)),
    ).toBe(true);
    expect(await appTester(taskFinished.performList, { authData, inputData: { events: ["task.canceled"] } })).toEqual(
      [],
    );
  });
});

describe("the REST hook against the relay's deliveries", () => {
  /** The bundle Zapier hands `perform` for a delivery the endpoint received, its body or signature changed when given. */
  const bundleOf = (
    authData: Record<string, string>,
    r: { headers: Record<string, string>; body: string; json: any },
    change: { body?: string; signature?: string | undefined } = {},
  ) => ({
    authData,
    inputData: {},
    cleanedRequest: r.json,
    rawRequest: {
      method: "POST",
      headers: { ...r.headers, "webhook-signature": change.signature ?? r.headers["webhook-signature"] },
      content: change.body ?? r.body,
      querystring: "",
    },
  });
  /**
   * Subscribes an endpoint of `hook` (at `path`) for `authData`'s connection, creates a task as
   * its client and answers the subscription and the relay's delivery of that task (earlier tests'
   * tasks of this client may end meanwhile and reach the endpoint too).
   */
  const deliveryToSubscription = async (
    authData: Record<string, string>,
    hook: Receiver,
    path: string,
    idem: string,
  ) => {
    const subscribeData = await appTester(taskFinished.performSubscribe, {
      authData,
      targetUrl: hook.url(path),
      inputData: {},
    });
    const task = await createImageTask(live.url, authData.api_key!, idem);
    const ofTask = () => hook.requests.find((r) => r.json.data?.id === task.id);
    while (!ofTask()) await hook.next();
    return { subscribeData, task, request: ofTask()! };
  };

  it("the endpoint performSubscribe registers receives the relay's signed webhook, which perform accepts", async () => {
    const hook = await startReceiver();
    try {
      const { subscribeData, task, request } = await deliveryToSubscription(
        authData,
        hook,
        "/zap",
        "zapier-endpoint-1",
      );
      expect(request.json).toMatchObject({ type: "task.succeeded", data: { id: task.id } });
      const withSecret = { ...authData, webhook_secret: client.secret };
      expect(await appTester(taskFinished.perform, bundleOf(withSecret, request))).toEqual([request.json]);
      // The same delivery with its body changed is refused: perform checked the relay's signature.
      const tampered = request.body.replace('"succeeded"', '"failed"');
      const error = await appTester(taskFinished.perform, bundleOf(withSecret, request, { body: tampered })).catch(
        (e: Error) => e,
      );
      expect((error as Error).message).toMatch(/signature did not verify/);
      await appTester(taskFinished.performUnsubscribe, { authData, subscribeData });
    } finally {
      await hook.close();
    }
  });

  it("for a client signing with ed25519, perform verifies the relay's v1a webhook with the published keys", async () => {
    const edClient = live.client("zapier-ed25519");
    const switched = await fetch(`${live.url}/openapi/v1/webhooks/settings`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${edClient.apiKey}`, "Content-Type": "application/json" },
      body: JSON.stringify({ signature: "ed25519" }),
    });
    expect(switched.status).toBe(200);
    // No webhook secret: only the v1a signature, checked with the JWKS of the connection's client ID, can pass.
    const edAuth = { base_url: live.url, api_key: edClient.apiKey, client_id: edClient.id };
    const hook = await startReceiver();
    try {
      const { subscribeData, request } = await deliveryToSubscription(
        edAuth,
        hook,
        "/zap-ed25519",
        "zapier-endpoint-ed25519-1",
      );
      expect(request.headers["webhook-signature"]).toMatch(/(^| )v1a,/);
      expect(await appTester(taskFinished.perform, bundleOf(edAuth, request))).toEqual([request.json]);
      // Changed by one word, or left with its v1 (HMAC) signature only, the same delivery is refused.
      const tampered = await appTester(
        taskFinished.perform,
        bundleOf(edAuth, request, { body: request.body.replace('"succeeded"', '"failed"') }),
      ).catch((e: Error) => e);
      expect((tampered as Error).message).toMatch(/signature did not verify: no v1a signature matches/);
      const hmacOnly = request.headers["webhook-signature"]!.split(" ").filter((e) => e.startsWith("v1,"));
      const unsigned = await appTester(
        taskFinished.perform,
        bundleOf(edAuth, request, { signature: hmacOnly.join(" ") || "v1,AAAA" }),
      ).catch((e: Error) => e);
      expect((unsigned as Error).message).toMatch(/signature did not verify/);
      await appTester(taskFinished.performUnsubscribe, { authData: edAuth, subscribeData });
    } finally {
      await hook.close();
    }
  });

  it("after a key rotation, a signature by the new key alone verifies once the JWKS is fetched again (at most once a minute)", async () => {
    const rotating = live.client("zapier-rotation");
    const call = relayCall(live.url, rotating.apiKey);
    expect((await call("/openapi/v1/webhooks/settings", "PUT", { signature: "ed25519" })).status).toBe(200);
    const auth = { base_url: live.url, api_key: rotating.apiKey, client_id: rotating.id };
    const hook = await startReceiver();
    try {
      const catchOne = () => catchTestWebhook(call, hook);
      const bundleWith = (r: { headers: Record<string, string>; body: string; json: any }, signature?: string) =>
        bundleOf(auth, r, { signature });
      const first = await catchOne();
      expect(await appTester(taskFinished.perform, bundleWith(first))).toEqual([first.json]); // the JWKS, one key, cached
      const rotated = await call("/openapi/v1/webhooks/secret/rotate", "POST");
      expect(rotated.status).toBe(200);
      const publicKey = String((await body(rotated)).data.public_key);
      // Each check on a webhook of its own: a webhook-id accepted once is a duplicate afterwards.
      const [second, third, fourth] = [await catchOne(), await catchOne(), await catchOne()];
      const signatures = [second, third, fourth].map((caught) => v1aOfRotation(caught, publicKey));
      for (const { v1a, byNew, byOld } of signatures) {
        expect(v1a).toHaveLength(2); // the overlap: the new key and the old one both sign
        if (!byNew || !byOld) throw new Error("no v1a signature of the new key");
      }
      // As sent, and with the old key's signature alone, the cached key verifies it.
      expect(await appTester(taskFinished.perform, bundleWith(second))).toEqual([second.json]);
      expect(await appTester(taskFinished.perform, bundleWith(third, signatures[1]!.byOld))).toEqual([third.json]);
      // The new key's alone: no cached key verifies, and the JWKS was read less than a minute ago.
      const early = await appTester(taskFinished.perform, bundleWith(fourth, signatures[2]!.byNew)).catch(
        (e: Error) => e,
      );
      expect((early as Error).message).toMatch(/no v1a signature matches/);
      // A minute on, the JWKS is read again; it lists both keys, and the new one verifies.
      vi.useFakeTimers({ toFake: ["Date"] });
      vi.setSystemTime(Date.now() + 61_000);
      try {
        expect(await appTester(taskFinished.perform, bundleWith(fourth, signatures[2]!.byNew))).toEqual([fourth.json]);
      } finally {
        vi.useRealTimers();
      }
      const jwks = await body(await fetch(`${live.url}/openapi/v1/webhooks/jwks/${rotating.id}`));
      const x = Buffer.from(publicKey.replace(/^whpk_/, ""), "base64").toString("base64url");
      expect(jwks.keys.map((k: { x: string }) => k.x)).toEqual([x, expect.any(String)]);
    } finally {
      await hook.close();
    }
  });
});

describe("the app's own tests", () => {
  it("pass as `npm test` in the app runs them (what Zapier's `zapier test` runs)", () => {
    const dir = new URL("../../integrations/zapier/", import.meta.url).pathname;
    const scripts = require("./package.json").scripts as Record<string, string>;
    expect(scripts.test).toBe("node --test test/*.test.js");
    const run = spawnSync("sh", ["-c", String(scripts.test)], { cwd: dir, encoding: "utf8", timeout: 120_000 });
    expect(run.stdout).toMatch(/^# fail 0$/m);
    expect(Number(/^# pass (\d+)$/m.exec(run.stdout)?.[1])).toBeGreaterThanOrEqual(7);
    expect(run.status, run.stdout + run.stderr).toBe(0);
  });
});

describe("zapier-platform-core on this machine", () => {
  it("made no connection beyond loopback while these tests ran", () => {
    expect(connectedTo.length).toBeGreaterThan(0);
    expect(connectedTo.filter((host) => !["127.0.0.1", "localhost", "::1"].includes(host))).toEqual([]);
  });
});
