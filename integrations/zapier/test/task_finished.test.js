"use strict";

/**
 * The app's own tests (`npm test` here, which is what `zapier test` runs): the trigger fails
 * closed, against a stand-in relay that answers as each case needs. The repository's
 * test/integration/zapier-app.test.ts runs the app against a real relay as well.
 */

const assert = require("node:assert/strict");
const { createHmac, randomBytes } = require("node:crypto");
const { after, before, describe, it } = require("node:test");
const zapier = require("zapier-platform-core");
const app = require("../index");
const { startStandinRelay } = require("./standin-relay");

const appTester = zapier.createAppTester(app);
const taskFinished = app.triggers.task_finished.operation;
const secret = `whsec_${randomBytes(32).toString("base64")}`;

/** A `task.succeeded` webhook as Zapier hands it to perform, signed `v1` with `key` (HMAC) unless given `signature`. */
const webhook = (authData, id, { signature, key = secret } = {}) => {
  const timestamp = String(Math.floor(Date.now() / 1000));
  const content = JSON.stringify({ id, type: "task.succeeded", timestamp: new Date().toISOString(), data: {} });
  const mac = createHmac("sha256", Buffer.from(key.replace(/^whsec_/, ""), "base64"));
  const sig = signature || `v1,${mac.update(`${id}.${timestamp}.${content}`).digest("base64")}`;
  return {
    authData,
    inputData: {},
    cleanedRequest: JSON.parse(content),
    rawRequest: {
      method: "POST",
      headers: { "Http-Webhook-Id": id, "Http-Webhook-Timestamp": timestamp, "Http-Webhook-Signature": sig },
      content,
      querystring: "",
    },
  };
};

const halted = async (promise, message) => {
  const error = await promise.then(
    () => undefined,
    (e) => e,
  );
  assert.ok(error instanceof Error, "perform did not refuse");
  assert.equal(error.name, "HaltedError");
  assert.match(error.message, message);
};

describe("Task Finished fails closed", () => {
  let relay;
  let n = 0;
  // A connection of its own per case: the signing scheme read from the relay is kept a minute per connection.
  const auth = (extra) => ({ base_url: relay.url, api_key: `grk_case_${n++}`, ...extra });

  before(async () => {
    relay = await startStandinRelay();
  });
  after(() => relay.close());

  it("the connection test refuses a connection with nothing to verify webhooks with", async () => {
    await assert.rejects(appTester(app.authentication.test, { authData: auth({}) }), /Add the client's Webhook Secret/);
    assert.deepEqual(await appTester(app.authentication.test, { authData: auth({ webhook_secret: secret }) }), {
      data: [],
      next_cursor: null,
    });
  });

  it("perform refuses every webhook of a connection with nothing to verify with", async () => {
    await halted(
      appTester(taskFinished.perform, webhook(auth({}), "evt_bare")),
      /neither a webhook secret nor a client ID/,
    );
  });

  it("turning the Zap on is refused when the connection lacks what the client's scheme needs", async () => {
    relay.settings = { signature: "ed25519" };
    const bundle = {
      authData: auth({ webhook_secret: secret }),
      targetUrl: "https://hooks.zapier.com/x",
      inputData: {},
    };
    await assert.rejects(
      appTester(taskFinished.performSubscribe, bundle),
      /the client signs with ed25519: add its Client ID/,
    );
    assert.equal(relay.count("POST /openapi/v1/webhooks/endpoints"), 0);
  });

  it("v1 (HMAC) does not pass for a client that signs with ed25519 only, and does during a switch's overlap", async () => {
    relay.settings = { signature: "ed25519" };
    const pinned = auth({ webhook_secret: secret, client_id: "cli_pinned" });
    await halted(appTester(taskFinished.perform, webhook(pinned, "evt_pinned")), /no v1a signature matches/);
    relay.settings = {
      signature: "ed25519",
      previous_signature_expires_at: new Date(Date.now() + 3_600_000).toISOString(),
    };
    const overlap = auth({ webhook_secret: secret, client_id: "cli_pinned" });
    assert.equal((await appTester(taskFinished.perform, webhook(overlap, "evt_overlap"))).length, 1);
  });

  it("a failing JWKS is asked at most once a minute, however many forged v1a webhooks arrive", async () => {
    relay.settings = { signature: "ed25519" };
    relay.jwksStatus = 503;
    const forging = auth({ client_id: "cli_flooded" });
    for (let i = 0; i < 50; i++) {
      const signature = `v1a,${randomBytes(64).toString("base64")}`;
      await halted(
        appTester(taskFinished.perform, webhook(forging, `evt_forged_${i}`, { signature })),
        /published keys/,
      );
    }
    assert.equal(relay.count("GET /openapi/v1/webhooks/jwks/cli_flooded"), 1);
  });

  it("a webhook-id accepted before starts nothing: a replay verifies and returns no item", async () => {
    relay.settings = { signature: "hmac" };
    const replayed = webhook(auth({ webhook_secret: secret }), "evt_replayed");
    assert.equal((await appTester(taskFinished.perform, replayed)).length, 1);
    assert.deepEqual(await appTester(taskFinished.perform, replayed), []);
  });
});

describe("Cancel Task", () => {
  it("POSTs the task's cancel route and returns the canceled task, flattened", async () => {
    const relay = await startStandinRelay();
    try {
      const authData = { base_url: relay.url, api_key: "grk_cancel", webhook_secret: secret };
      const task = await appTester(app.creates.cancel_task.operation.perform, {
        authData,
        inputData: { task_id: "task_w" },
      });
      assert.deepEqual(task, {
        id: "task_w",
        status: "canceled",
        output: null,
        usage: { points_charged: 0, points_refunded: null },
      });
      assert.equal(relay.count("POST /openapi/v1/tasks/task_w/cancel"), 1);
    } finally {
      await relay.close();
    }
  });
});
