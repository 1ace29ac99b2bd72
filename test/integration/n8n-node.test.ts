import { execFileSync, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { IDataObject, INodeExecutionData, INodePropertyOptions, INodeType } from "n8n-workflow";
import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { installConnectors } from "../helpers/connectors.js";
import { ROOT } from "../helpers/doc-blocks.js";
import { createImageTask, type LiveRelay, startLiveRelay } from "../helpers/live-relay.js";
import { startReceiver } from "../helpers/receiver.js";
import { newSecret, type StandinRelay, startStandinRelay } from "../helpers/standin-relay.js";
import { catchTestWebhook, relayCall, v1aOfRotation } from "../helpers/v1a-rotation.js";
import {
  type ContextOptions,
  type GenrelayPackage,
  HttpError,
  PACKAGE_DIR,
  type WebhookServer,
  executeContext,
  hookContext,
  loadOptionsContext,
  loadPackage,
  startWebhookServer,
  testCredential,
} from "../helpers/n8n-harness.js";

/** A JSON answer of the relay, as the tests read it. */
const body = async (response: Response): Promise<any> => response.json();
/**
 * The n8n community node package in integrations/n8n-nodes-genrelay (docs/contract.md, "Connectors"):
 * built with tsc, linted with n8n's node linter, and run through n8n's function contexts
 * (test/helpers/n8n-harness.ts) against a real relay on loopback, its endpoints API included: the
 * endpoint the trigger registers receives the relay's signed webhooks, which its signature check accepts.
 */

// The package's own tools, installed in its own node_modules by scripts/connectors.mjs (npm test's pretest).
const TSC = join(PACKAGE_DIR, "node_modules", "typescript", "bin", "tsc");
const TRIGGER = "nodes/Genrelay/GenrelayTrigger.node.ts";
/** The trigger with two of n8n's conventions broken: its display name and its webhook method `delete`. */
const brokenTrigger = () =>
  readFileSync(join(PACKAGE_DIR, TRIGGER), "utf8")
    .replace('displayName: "Genrelay Trigger"', 'displayName: "Genrelay events"')
    .replace("async delete(", "async remove(");

interface LintResult {
  filePath: string;
  errorCount: number;
  messages: Array<{ line: number; ruleId: string; message: string }>;
}

/**
 * The package's linter (its npm script "lint": `eslint nodes credentials package.json`) in a process
 * of its own, run once for both lint tests: the config the trigger gets, the package's results, and
 * the broken trigger's. Its own process because eslint-plugin-n8n-nodes-base takes NODE_ENV=test,
 * which vitest sets, for its own test run and then checks other things.
 */
function runLint() {
  const { NODE_ENV: _, VITEST: __, ...env } = process.env;
  const run = spawnSync(process.execPath, [join(ROOT, "test", "helpers", "n8n-lint-child.mjs")], {
    cwd: PACKAGE_DIR,
    env,
    input: JSON.stringify({
      configOf: TRIGGER,
      files: ["nodes", "credentials", "package.json"],
      text: { code: brokenTrigger(), filePath: TRIGGER },
    }),
    encoding: "utf8",
    timeout: 60_000,
  });
  expect(run.status, run.stderr).toBe(0);
  return JSON.parse(run.stdout) as {
    config: { rules: Record<string, unknown> };
    results: LintResult[];
    textResults: LintResult[];
  };
}
let lintRun: ReturnType<typeof runLint> | undefined;
const linted = () => (lintRun ??= runLint());

let pkg: GenrelayPackage;
let live: LiveRelay;
let client: { id: string; apiKey: string; secret: string };

beforeAll(async () => {
  installConnectors();
  // The package's own build (its npm script "build"): tsc, then the icons beside the built files.
  execFileSync(process.execPath, [TSC, "-p", join(PACKAGE_DIR, "tsconfig.json")], { cwd: PACKAGE_DIR, stdio: "pipe" });
  execFileSync(process.execPath, [join(PACKAGE_DIR, "copy-icons.mjs")], { cwd: PACKAGE_DIR, stdio: "pipe" });
  pkg = loadPackage();
  live = await startLiveRelay();
  client = live.client("n8n");
}, 60_000);

afterAll(async () => {
  await live?.close();
});

const options = (overrides: Partial<ContextOptions> = {}): ContextOptions => ({
  credentialType: new pkg.GenrelayApi(),
  credentials: { baseUrl: `${live.url}/`, apiKey: client.apiKey, webhookSecret: client.secret },
  ...overrides,
});

const relayGet = async (path: string, apiKey = client.apiKey) =>
  fetch(`${live.url}${path}`, { headers: { Authorization: `Bearer ${apiKey}` } });

describe("the package as n8n loads it", () => {
  it("lists its built credential and nodes in package.json's n8n section, each with its icons", () => {
    const manifest = JSON.parse(readFileSync(join(PACKAGE_DIR, "package.json"), "utf8"));
    expect(manifest.keywords).toContain("n8n-community-node-package");
    expect(manifest.peerDependencies).toEqual({ "n8n-workflow": "*" });
    expect(manifest.n8n.n8nNodesApiVersion).toBe(1);
    for (const file of [...manifest.n8n.nodes, ...manifest.n8n.credentials])
      expect(existsSync(join(PACKAGE_DIR, file)), file).toBe(true);
    const icons = [
      new pkg.Genrelay().description.icon,
      new pkg.GenrelayTrigger().description.icon,
      new pkg.GenrelayApi().icon,
    ];
    for (const [icon, from] of icons.map((i, n) => [i, n < 2 ? "dist/nodes/Genrelay" : "dist/credentials"] as const)) {
      for (const path of Object.values(icon as Record<string, string>))
        expect(existsSync(join(PACKAGE_DIR, from, path.replace(/^file:/, ""))), path).toBe(true);
    }
    expect(new pkg.GenrelayApi().properties.map((p) => p.name)).toEqual([
      "baseUrl",
      "apiKey",
      "webhookSecret",
      "clientId",
    ]);
  });

  it("passes n8n's node linter (eslint-plugin-n8n-nodes-base and the community-nodes rules)", () => {
    const { config, results } = linted();
    expect(Object.keys(config.rules)).toEqual(
      expect.arrayContaining([
        "n8n-nodes-base/node-class-description-name-unsuffixed-trigger-node",
        "@n8n/community-nodes/webhook-lifecycle-complete",
      ]),
    );
    expect(results.length).toBeGreaterThanOrEqual(7);
    expect(results.flatMap((r) => r.messages.map((m) => `${r.filePath}:${m.line} ${m.ruleId}: ${m.message}`))).toEqual(
      [],
    );
  }, 60_000);

  it("the linter refuses a trigger that breaks n8n's conventions", () => {
    const { textResults } = linted();
    const rules = textResults.flatMap((r) => r.messages.map((m) => m.ruleId));
    expect(rules).toEqual(
      expect.arrayContaining([
        "@n8n/community-nodes/webhook-lifecycle-complete",
        "@n8n/community-nodes/trigger-node-conventions",
        "n8n-nodes-base/node-class-description-display-name-unsuffixed-trigger-node",
      ]),
    );
    // What the CLI's exit status 1 says: at least one error.
    expect(textResults.reduce((n, r) => n + r.errorCount, 0)).toBeGreaterThan(0);
  }, 60_000);
});

describe("credential GenrelayApi", () => {
  it("its test request passes with the client's API key and fails with another", async () => {
    const credential = new pkg.GenrelayApi();
    await expect(testCredential(credential, options().credentials)).resolves.toMatchObject({ data: [] });
    const refused = await testCredential(credential, { ...options().credentials, apiKey: "grk_not_a_key" }).catch(
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(HttpError);
    expect((refused as HttpError).statusCode).toBe(401);
    expect((refused as HttpError).body).toMatchObject({ error: { code: "invalid_api_key" } });
  });
});

describe("action node Genrelay, against the relay", () => {
  const run = async (
    items: Record<string, unknown>[],
    extra: { executionId?: string; continueOnFail?: boolean } = {},
  ) => {
    const node = new pkg.Genrelay();
    const [output] = await (node.execute as (this: unknown) => Promise<INodeExecutionData[][]>).call(
      executeContext({ ...options(), items, ...extra }),
    );
    return output!;
  };

  it("offers the catalog's models as options, loaded from /openapi/v1/models", async () => {
    const node = new pkg.Genrelay();
    const load = node.methods!.loadOptions!;
    const images = (await load.getImageModels!.call(loadOptionsContext(options()) as never)) as INodePropertyOptions[];
    const videos = (await load.getVideoModels!.call(loadOptionsContext(options()) as never)) as INodePropertyOptions[];
    expect(images).toEqual([
      { name: "Flux Lite", value: "flux-lite", description: "flux-lite" },
      { name: "P Image", value: "p-image", description: "p-image" },
    ]);
    expect(videos.map((o) => o.value)).toEqual(["v-video", "v-video-pro"]);
  });

  it("creates an image task, one per execution and item (its Idempotency-Key), and gets it", async () => {
    const params = {
      resource: "task",
      operation: "createImage",
      model: "p-image",
      mode: "generate",
      prompt: "a lighthouse at dawn",
      additionalFields: { metadata: '{"order":"n8n-1"}' },
    };
    const [first] = await run([params], { executionId: "7001" });
    expect(first!.json).toMatchObject({
      type: "image",
      status: "queued",
      model: "p-image",
      metadata: { order: "n8n-1" },
      output: null,
    });
    expect(first!.json.id).toMatch(/^task_/);
    expect(first!.pairedItem).toEqual({ item: 0 });
    // n8n retrying the node in the same execution replays the task; another execution makes another.
    const [again] = await run([params], { executionId: "7001" });
    const [other] = await run([params], { executionId: "7002" });
    expect(again!.json.id).toBe(first!.json.id);
    expect(other!.json.id).not.toBe(first!.json.id);

    const [read] = await run([{ resource: "task", operation: "get", taskId: first!.json.id }]);
    expect(read!.json).toMatchObject({ id: first!.json.id, type: "image", model: "p-image" });
    expect(read!.json).toHaveProperty("usage");
  });

  it("creates a video task with its mode and duration", async () => {
    const [task] = await run([
      {
        resource: "task",
        operation: "createVideo",
        model: "v-video",
        videoMode: "t2v",
        prompt: "waves at night",
        duration: 5,
        additionalFields: { resolution: "720p" },
      },
    ]);
    expect(task!.json).toMatchObject({ type: "video", status: "queued", model: "v-video" });
  });

  it("lists tasks: up to a limit, or all of them, with filters", async () => {
    const some = await run([{ resource: "task", operation: "getAll", returnAll: false, limit: 1, filters: {} }]);
    expect(some).toHaveLength(1);
    const all = await run([{ resource: "task", operation: "getAll", returnAll: true, filters: { type: "video" } }]);
    expect(all.length).toBeGreaterThanOrEqual(1);
    expect(all.every((item) => item.json.type === "video")).toBe(true);
  });

  it("turns the relay's errors into node errors, or into items with continueOnFail", async () => {
    const missing = { resource: "task", operation: "get", taskId: "task_does_not_exist" };
    await expect(run([missing])).rejects.toThrow(/task_not_found/);
    const [item] = await run([missing], { continueOnFail: true });
    expect(item!.json.error).toMatch(/task_not_found/);
    await expect(
      run([{ resource: "task", operation: "createImage", model: "p-image", prompt: "x", additionalFields: {} }]),
    ).rejects.toThrow(/validation_error|invalid_request/);
    await expect(
      run([
        {
          resource: "task",
          operation: "createImage",
          model: "p-image",
          prompt: "a fox",
          additionalFields: { metadata: "{not json" },
        },
      ]),
    ).rejects.toThrow(/Metadata is not JSON/);
  });
});

describe("trigger node GenrelayTrigger", () => {
  let trigger: INodeType;
  let server: WebhookServer;
  const terminal = ["task.succeeded", "task.failed", "task.canceled"];

  beforeAll(async () => {
    trigger = new pkg.GenrelayTrigger();
    server = await startWebhookServer(trigger, options({ parameters: { events: terminal } }));
  });
  afterAll(async () => server?.close());

  const methods = () => trigger.webhookMethods!.default!;
  const hooks = (staticData: IDataObject, events = terminal) =>
    hookContext({ ...options({ parameters: { events } }), webhookUrl: server.url, staticData }) as never;

  describe("webhook methods (the relay's endpoints API)", () => {
    it("activation subscribes the webhook URL as an endpoint and keeps its id; deactivation removes it", async () => {
      const staticData: IDataObject = {};
      expect(await methods().checkExists!.call(hooks(staticData))).toBe(false);
      expect(await methods().create!.call(hooks(staticData))).toBe(true);
      expect(staticData.endpointId).toMatch(/^ep_/);

      const read = await relayGet(`/openapi/v1/webhooks/endpoints/${staticData.endpointId}`);
      expect(read.status).toBe(200);
      expect((await body(read)).data).toMatchObject({
        id: staticData.endpointId,
        url: server.url,
        events: [...terminal].sort(),
      });
      const other = live.client("someone-else");
      expect((await relayGet(`/openapi/v1/webhooks/endpoints/${staticData.endpointId}`, other.apiKey)).status).toBe(
        404,
      );

      expect(await methods().checkExists!.call(hooks(staticData))).toBe(true);
      const id = staticData.endpointId;
      expect(await methods().delete!.call(hooks(staticData))).toBe(true);
      expect(staticData.endpointId).toBeUndefined();
      expect((await relayGet(`/openapi/v1/webhooks/endpoints/${id}`)).status).toBe(404);
      expect(await methods().delete!.call(hooks(staticData))).toBe(true);
    });

    it("an endpoint removed elsewhere is made again; one for other events is replaced", async () => {
      const staticData: IDataObject = {};
      await methods().create!.call(hooks(staticData));
      const first = staticData.endpointId as string;
      await fetch(`${live.url}/openapi/v1/webhooks/endpoints/${first}`, {
        method: "DELETE",
        headers: { Authorization: `Bearer ${client.apiKey}` },
      });
      expect(await methods().checkExists!.call(hooks(staticData))).toBe(false);
      expect(staticData.endpointId).toBeUndefined();

      await methods().create!.call(hooks(staticData));
      const second = staticData.endpointId as string;
      expect(await methods().checkExists!.call(hooks(staticData, ["task.succeeded"]))).toBe(false);
      expect((await relayGet(`/openapi/v1/webhooks/endpoints/${second}`)).status).toBe(404);
      await methods().create!.call(hooks(staticData, ["task.succeeded"]));
      const third = await body(await relayGet(`/openapi/v1/webhooks/endpoints/${staticData.endpointId}`));
      expect(third.data.events).toEqual(["task.succeeded"]);
      // A deactivation that finds the endpoint already gone still succeeds.
      await fetch(`${live.url}/openapi/v1/webhooks/endpoints/${staticData.endpointId}`, {
        method: "DELETE",
        headers: { Authorization: `Bearer ${client.apiKey}` },
      });
      expect(await methods().delete!.call(hooks(staticData))).toBe(true);
    });

    it("the endpoint it registers receives the relay's signed webhook of a task without callback_url, and emits it", async () => {
      const staticData: IDataObject = {};
      await methods().create!.call(hooks(staticData));
      try {
        const task = await createImageTask(live.url, client.apiKey, "n8n-trigger-endpoint-1");
        // Earlier tests' tasks of this client may end meanwhile and reach the endpoint too.
        const ofTask = () => server.emitted.flat().find((i) => (i.json.data as IDataObject)?.id === task.id);
        while (!ofTask()) await server.nextEmission();
        expect(ofTask()!.json).toMatchObject({ type: "task.succeeded", data: { id: task.id, status: "succeeded" } });
        // The attempt is recorded once the trigger has answered: read the log when it is there.
        let deliveries: Array<{ destination: string; outcome: string; event_id: string }> = [];
        while (deliveries.length === 0) {
          deliveries = (await body(await relayGet(`/openapi/v1/tasks/${task.id}/deliveries`))).data;
          if (deliveries.length === 0) await new Promise((r) => setImmediate(r));
        }
        expect(deliveries.map((d) => [d.destination, d.outcome])).toEqual([[staticData.endpointId, "succeeded"]]);
        expect(deliveries[0]!.event_id).toBe(ofTask()!.json.id);
      } finally {
        await methods().delete!.call(hooks(staticData));
      }
    });

    it("a refused API key fails activation with the relay's error", async () => {
      const refused = hookContext({
        ...options({ parameters: { events: terminal } }),
        credentials: { ...options().credentials, apiKey: "grk_wrong" },
        webhookUrl: server.url,
        staticData: {},
      });
      await expect(methods().create!.call(refused as never)).rejects.toThrow(/invalid_api_key/);
    });
  });

  describe("webhook(): Standard Webhooks signature, checked before anything is emitted", () => {
    const sign = (secret: string, id: string, body: string, at: Date) => new Webhook(secret).sign(id, at, body);
    const post = (body: string, headers: Record<string, string>) =>
      fetch(server.url, { method: "POST", headers: { "Content-Type": "application/json", ...headers }, body });
    const event = (type = "task.succeeded") => ({
      id: `evt_${Math.random().toString(36).slice(2)}`,
      type,
      timestamp: new Date().toISOString(),
      data: { id: "task_x", status: "succeeded" },
    });
    const signedHeaders = (id: string, body: string, secret = client.secret, at = new Date()) => ({
      "webhook-id": id,
      "webhook-timestamp": String(Math.floor(at.getTime() / 1000)),
      "webhook-signature": sign(secret, id, body, at),
    });

    it("emits a genuine webhook, signed independently with the standardwebhooks package", async () => {
      const e = event();
      const body = JSON.stringify(e);
      const emitted = server.nextEmission();
      const response = await post(body, signedHeaders(e.id, body));
      expect(response.status).toBe(200);
      expect((await emitted)[0]!.json).toEqual(e);
    });

    it("refuses with 401, and emits nothing, a tampered body, a wrong secret, a stale or future timestamp, missing headers", async () => {
      const e = event();
      const body = JSON.stringify(e);
      const before = server.emitted.length;
      const sixMinutes = 6 * 60 * 1000;
      const otherSecret = `whsec_${Buffer.from("another client's secret, 32 bytes").toString("base64")}`;
      const cases: Array<[string, string, Record<string, string>]> = [
        ["tampered body", body.replace("succeeded", "failed"), signedHeaders(e.id, body)],
        ["wrong secret", body, signedHeaders(e.id, body, otherSecret)],
        ["stale timestamp", body, signedHeaders(e.id, body, client.secret, new Date(Date.now() - sixMinutes))],
        ["future timestamp", body, signedHeaders(e.id, body, client.secret, new Date(Date.now() + sixMinutes))],
        ["another webhook-id", body, { ...signedHeaders(e.id, body), "webhook-id": "evt_other" }],
        ["no signature", body, { "webhook-id": e.id, "webhook-timestamp": String(Math.floor(Date.now() / 1000)) }],
      ];
      for (const [what, sent, headers] of cases) {
        const response = await post(sent, headers);
        expect(response.status, what).toBe(401);
        expect(await response.json(), what).toMatchObject({ error: { code: "invalid_signature" } });
      }
      expect(server.emitted.length).toBe(before);
    });

    it("accepts the second signature of a rotation, and answers 200 without emitting an event it does not listen to", async () => {
      const e = event();
      const body = JSON.stringify(e);
      const headers = signedHeaders(e.id, body);
      const stale = signedHeaders(
        e.id,
        body,
        `whsec_${Buffer.from("the secret before the rotation..").toString("base64")}`,
      );
      const emitted = server.nextEmission();
      expect(
        (
          await post(body, {
            ...headers,
            "webhook-signature": `${stale["webhook-signature"]} ${headers["webhook-signature"]}`,
          })
        ).status,
      ).toBe(200);
      expect((await emitted)[0]!.json.id).toBe(e.id);

      const before = server.emitted.length;
      const processing = event("task.processing");
      const pBody = JSON.stringify(processing);
      expect((await post(pBody, signedHeaders(processing.id, pBody))).status).toBe(200);
      expect(server.emitted.length).toBe(before);
    });

    it("emits the relay's own signed webhook of a finished task", async () => {
      const emitted = server.nextEmission();
      const task = await createImageTask(live.url, client.apiKey, "n8n-trigger-e2e-1", {
        prompt: "a red fox in snow",
        callback_url: server.url,
      });
      const [item] = await emitted;
      expect(item!.json).toMatchObject({ type: "task.succeeded", data: { id: task.id, status: "succeeded" } });
      expect(String(item!.json.id)).toMatch(/^evt_/);
    });
  });
  describe("webhook(): a client signing with ed25519 (v1a), verified with the keys the relay publishes", () => {
    let edClient: { id: string; apiKey: string; secret: string };
    let edServer: WebhookServer;
    // No webhook secret: only the v1a signature, checked with the JWKS of the credential's client ID, can pass.
    const edOptions = () =>
      options({
        credentials: {
          baseUrl: `${live.url}/`,
          apiKey: edClient.apiKey,
          webhookSecret: "",
          clientId: edClient.id,
        } as never,
        parameters: { events: terminal },
      });

    beforeAll(async () => {
      edClient = live.client("n8n-ed25519");
      const switched = await fetch(`${live.url}/openapi/v1/webhooks/settings`, {
        method: "PUT",
        headers: { Authorization: `Bearer ${edClient.apiKey}`, "Content-Type": "application/json" },
        body: JSON.stringify({ signature: "ed25519" }),
      });
      expect(switched.status).toBe(200);
      edServer = await startWebhookServer(trigger, edOptions());
    });
    afterAll(async () => edServer?.close());
    /** A webhook caught from the relay, sent to the trigger's endpoint as it came, or with another `webhook-signature`. */
    const replay = (caught: { headers: Record<string, string>; body: string }, signature?: string) =>
      fetch(edServer.url, {
        method: "POST",
        headers: {
          "Content-Type": "application/json",
          "webhook-id": caught.headers["webhook-id"]!,
          "webhook-timestamp": caught.headers["webhook-timestamp"]!,
          "webhook-signature": signature ?? caught.headers["webhook-signature"]!,
        },
        body: caught.body,
      });

    it("the endpoint it registers receives the relay's v1a-signed webhook, which it emits; tampered, it is refused", async () => {
      const staticData: IDataObject = {};
      await methods().create!.call(hookContext({ ...edOptions(), webhookUrl: edServer.url, staticData }) as never);
      try {
        const task = await createImageTask(live.url, edClient.apiKey, "n8n-trigger-ed25519-1");
        const ofTask = () => edServer.emitted.flat().find((i) => (i.json.data as IDataObject)?.id === task.id);
        while (!ofTask()) await edServer.nextEmission();
        expect(ofTask()!.json).toMatchObject({ type: "task.succeeded", data: { id: task.id, status: "succeeded" } });
      } finally {
        await methods().delete!.call(hookContext({ ...edOptions(), webhookUrl: edServer.url, staticData }) as never);
      }
      // A real webhook of the relay, caught as it was sent: its v1a signature verifies, and with one
      // byte of the body changed it does not (nor with only its v1 HMAC signature left).
      const hook = await startReceiver();
      try {
        const caught = await catchTestWebhook(relayCall(live.url, edClient.apiKey), hook);
        expect(caught.headers["webhook-signature"]).toMatch(/(^| )v1a,/);
        const before = edServer.emitted.length;
        expect((await replay(caught)).status).toBe(200);
        expect(edServer.emitted.length).toBe(before + 1);
        const tampered = await replay({ ...caught, body: caught.body.replace('"succeeded"', '"failed"') });
        expect(tampered.status).toBe(401);
        expect((await body(tampered)).error.code).toBe("invalid_signature");
        const hmacOnly = caught.headers["webhook-signature"]!.split(" ").filter((e) => e.startsWith("v1,"));
        expect((await replay(caught, hmacOnly.join(" ") || "v1,AAAA")).status).toBe(401);
        expect(edServer.emitted.length).toBe(before + 1);
      } finally {
        await hook.close();
      }
    });
    it("after a key rotation, the new key's signature alone verifies once the JWKS is fetched again (at most once a minute)", async () => {
      const call = relayCall(live.url, edClient.apiKey);
      const hook = await startReceiver();
      try {
        const catchOne = () => catchTestWebhook(call, hook);
        const first = await catchOne();
        expect((await replay(first, first.headers["webhook-signature"]!)).status).toBe(200); // the JWKS is cached
        const rotated = await call("/openapi/v1/webhooks/secret/rotate", "POST");
        expect(rotated.status).toBe(200);
        const second = await catchOne();
        const { v1a, byNew, byOld } = v1aOfRotation(second, String((await body(rotated)).data.public_key));
        expect(v1a).toHaveLength(2); // the overlap: the new key and the old one both sign
        if (!byNew || !byOld) throw new Error("no v1a signature of the new key");
        expect((await replay(second, second.headers["webhook-signature"]!)).status).toBe(200);
        expect((await replay(second, byOld)).status).toBe(200); // the old key, cached
        // The new key's alone: no cached key verifies, and the JWKS was read less than a minute ago.
        expect((await replay(second, byNew)).status).toBe(401);
        vi.useFakeTimers({ toFake: ["Date"] });
        vi.setSystemTime(Date.now() + 61_000);
        try {
          expect((await replay(second, byNew)).status).toBe(200); // read again: it lists both keys
        } finally {
          vi.useRealTimers();
        }
      } finally {
        await hook.close();
      }
    });
  });
});

describe("trigger node GenrelayTrigger fails closed (against a stand-in relay that answers as told)", () => {
  let trigger: INodeType;
  let standin: StandinRelay;
  let server: WebhookServer;
  const secret = newSecret();
  const terminal = ["task.succeeded", "task.failed", "task.canceled"];
  const standinOptions = (credentials: Record<string, string>) =>
    options({
      credentials: { baseUrl: standin.url, apiKey: "grk_standin", ...credentials } as never,
      parameters: { events: terminal },
    });
  const post = (body: string, headers: Record<string, string>) =>
    fetch(server.url, { method: "POST", headers: { "Content-Type": "application/json", ...headers }, body });
  const hmacSigned = (id: string, body: string) => {
    const at = new Date();
    return {
      "webhook-id": id,
      "webhook-timestamp": String(Math.floor(at.getTime() / 1000)),
      "webhook-signature": new Webhook(secret).sign(id, at, body),
    };
  };
  const succeeded = (id: string) =>
    JSON.stringify({ id, type: "task.succeeded", timestamp: new Date().toISOString(), data: { id: "task_s" } });

  beforeAll(async () => {
    trigger = new pkg.GenrelayTrigger();
    standin = await startStandinRelay();
    // The credential holds the client's old secret too: it must not pass for a client that signs with ed25519.
    server = await startWebhookServer(trigger, standinOptions({ webhookSecret: secret, clientId: "cli_standin" }));
  });
  afterAll(async () => {
    await server?.close();
    await standin?.close();
  });

  const activate = (credentials: Record<string, string>) =>
    trigger.webhookMethods!.default!.create!.call(
      hookContext({ ...standinOptions(credentials), webhookUrl: server.url, staticData: {} }) as never,
    );

  it("refuses activation with nothing to verify with, or without what the client's scheme needs", async () => {
    standin.settings = { signature: "hmac" };
    await expect(activate({ webhookSecret: "", clientId: "" })).rejects.toThrow(
      "The trigger cannot verify webhooks: the credential has neither a webhook secret nor a client ID.",
    );
    standin.settings = { signature: "ed25519" };
    await expect(activate({ webhookSecret: secret, clientId: "" })).rejects.toThrow(
      "The trigger cannot verify webhooks: the client signs with ed25519: add its client ID (cli_…) to the credential.",
    );
    expect(standin.count("POST /openapi/v1/webhooks/endpoints")).toBe(0);
  });

  it("refuses v1 (HMAC) for a client that signs with ed25519 only, and accepts it during a switch's overlap", async () => {
    standin.settings = { signature: "ed25519" };
    const forged = succeeded("evt_pinned");
    const refused = await post(forged, hmacSigned("evt_pinned", forged));
    expect(refused.status).toBe(401);
    expect(await refused.json()).toEqual({
      error: { code: "invalid_signature", message: "no v1a signature matches" },
    });
    // A minute on the settings are read again: now inside a switch's overlap, where v1 still counts.
    standin.settings = {
      signature: "ed25519",
      previous_signature_expires_at: new Date(Date.now() + 3_600_000).toISOString(),
    };
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(Date.now() + 61_000);
    try {
      const emitted = server.nextEmission();
      const body = succeeded("evt_overlap");
      expect((await post(body, hmacSigned("evt_overlap", body))).status).toBe(200);
      expect((await emitted)[0]!.json.id).toBe("evt_overlap");
    } finally {
      vi.useRealTimers();
    }
  });

  it("asks a failing JWKS at most once a minute, however many forged v1a webhooks arrive", async () => {
    standin.settings = { signature: "ed25519" };
    standin.jwksStatus = 503;
    const asked = () => standin.count("GET /openapi/v1/webhooks/jwks/cli_standin");
    const before = asked();
    for (let i = 0; i < 50; i++) {
      const body = succeeded(`evt_forged_${i}`);
      const at = String(Math.floor(Date.now() / 1000));
      const forged = `v1a,${randomBytes(64).toString("base64")}`;
      const response = await post(body, {
        "webhook-id": `evt_forged_${i}`,
        "webhook-timestamp": at,
        "webhook-signature": forged,
      });
      expect(response.status).toBe(401);
    }
    expect(asked() - before).toBeLessThanOrEqual(1);
  });

  it("starts nothing for a webhook-id it accepted before: a replay answers 200 and emits nothing", async () => {
    standin.settings = { signature: "hmac" };
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(Date.now() + 122_000); // past the settings read of the tests above
    try {
      const body = succeeded("evt_replayed");
      const headers = hmacSigned("evt_replayed", body);
      const emitted = server.nextEmission();
      expect((await post(body, headers)).status).toBe(200);
      expect((await emitted)[0]!.json.id).toBe("evt_replayed");
      const before = server.emitted.length;
      expect((await post(body, headers)).status).toBe(200);
      expect(server.emitted.length).toBe(before);
    } finally {
      vi.useRealTimers();
    }
  });

  it("Cancel: POSTs the task's cancel route and returns the canceled task, flattened", async () => {
    const context = executeContext({
      ...standinOptions({ webhookSecret: secret }),
      items: [{ resource: "task", operation: "cancel", taskId: "task_waiting" }],
    });
    const node = new pkg.Genrelay();
    const [items] = await (node.execute as (this: unknown) => Promise<INodeExecutionData[][]>).call(context);
    expect(items!.map((item) => item.json)).toEqual([
      {
        id: "task_waiting",
        type: "image",
        status: "canceled",
        error: null,
        output: null,
        usage: { points_charged: 0, points_refunded: null },
      },
    ]);
    expect(standin.count("POST /openapi/v1/tasks/task_waiting/cancel")).toBe(1);
  });
});
