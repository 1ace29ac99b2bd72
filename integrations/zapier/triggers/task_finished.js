"use strict";

const { ENDPOINTS, TERMINAL_EVENTS, api } = require("../lib/api");
const { firstDelivery, header, missingFor, schemesOf, signatureProblem } = require("../lib/signature");
const sample = require("./task_finished.sample.json");

/** The outcomes the Zap listens to: all three terminal events unless the user picked some. */
const selectedEvents = (bundle) => {
  const picked = [].concat(bundle.inputData?.events || []).filter((e) => TERMINAL_EVENTS.includes(e));
  return (picked.length > 0 ? [...new Set(picked)] : [...TERMINAL_EVENTS]).sort();
};

/** A webhook body as Zapier keeps it: the event's id, type and timestamp, and the task as `data`. */
const asItem = (event) => ({ id: event.id, type: event.type, timestamp: event.timestamp, data: event.data });

/** How long a client's signing scheme, read from its webhook settings, is trusted before it is read again. */
const SETTINGS_MAX_AGE_MS = 60_000;

/** Each connection's signing schemes (by relay and API key), and when they were read. */
const schemeCache = new Map();

/**
 * The schemes whose signatures count for the connected client (lib/signature.js `schemesOf`): read
 * from its webhook settings at most once a minute; the ones pinned when the Zap was turned on while
 * the relay cannot be read.
 */
const signingSchemes = async (z, bundle) => {
  const cacheKey = `${api(bundle, "")} ${bundle.authData?.api_key || ""}`;
  const cached = schemeCache.get(cacheKey);
  if (cached && Date.now() - cached.readAt < SETTINGS_MAX_AGE_MS) return cached.schemes;
  const response = await z
    .request({ url: api(bundle, "/openapi/v1/webhooks/settings"), skipThrowForStatus: true })
    .catch(() => undefined);
  if (response?.status !== 200) return cached?.schemes || bundle.subscribeData?.signature_schemes;
  const schemes = schemesOf(response.data?.data, Date.now());
  schemeCache.set(cacheKey, { schemes, readAt: Date.now() });
  return schemes;
};

/**
 * What a connection lacks to verify the connected client's webhooks, or undefined: a Zap that could
 * not tell a forged event from a real one is refused when it is turned on, not run on every event.
 */
const verificationProblem = (bundle, schemes) => {
  const secret = String(bundle.authData?.webhook_secret || "").trim();
  const clientId = String(bundle.authData?.client_id || "").trim();
  if (!secret && !clientId) return "the connection has neither a webhook secret nor a client ID";
  const can = (schemes || ["hmac", "ed25519"]).some((s) => (s === "hmac" ? secret : clientId));
  return can ? undefined : missingFor(schemes);
};

/** Turning the Zap on subscribes its hook URL as an endpoint of the connected client. */
const performSubscribe = async (z, bundle) => {
  const schemes = await signingSchemes(z, bundle);
  const problem = verificationProblem(bundle, schemes);
  if (problem) throw new z.errors.Error(`Task Finished cannot verify webhooks: ${problem}.`, "InvalidConnection", 400);
  const response = await z.request({
    url: api(bundle, ENDPOINTS),
    method: "POST",
    body: { url: bundle.targetUrl, events: selectedEvents(bundle), description: "Zapier: Task finished" },
  });
  // Kept by Zapier as bundle.subscribeData: the endpoint, and the schemes pinned when the Zap was turned on.
  return { ...response.data.data, signature_schemes: schemes };
};

/** Turning the Zap off removes the endpoint; one already gone (404) is what turning off wants. */
const performUnsubscribe = async (z, bundle) => {
  const id = bundle.subscribeData?.id;
  if (!id) return {};
  const response = await z.request({
    url: api(bundle, `${ENDPOINTS}/${encodeURIComponent(id)}`),
    method: "DELETE",
    skipThrowForStatus: true,
  });
  if (response.status !== 404) response.throwForStatus();
  return {};
};

/**
 * The client's published Ed25519 keys (GET /openapi/v1/webhooks/jwks/{client_id}, no API key needed)
 * on the connected relay, when the connection names its client ID; none otherwise.
 */
const jwksOf = (z, bundle) => {
  const clientId = String(bundle.authData?.client_id || "").trim();
  if (!clientId) return undefined;
  return {
    url: api(bundle, `/openapi/v1/webhooks/jwks/${encodeURIComponent(clientId)}`),
    fetch: async (url) => {
      const response = await z.request({ url, skipThrowForStatus: true });
      if (response.status !== 200) throw new Error(`the relay answered ${response.status}`);
      return response.data;
    },
  };
};

/**
 * A webhook arrived at the Zap's hook URL. Its signature is checked on the raw body first, in the
 * scheme the client signs with (`v1` HMAC with the connection's secret, `v1a` Ed25519 with the
 * client's published keys; during a switch's overlap either), and a webhook that fails stops the run
 * (the Zap's history shows why) instead of starting it with data nobody can vouch for. A connection
 * with nothing to verify with fails every webhook. A webhook-id accepted before (a replay, or the
 * relay's retry of a delivery whose answer was lost) starts nothing.
 */
const perform = async (z, bundle) => {
  const raw = bundle.rawRequest || {};
  const schemes = await signingSchemes(z, bundle);
  const input = { secret: bundle.authData?.webhook_secret, jwks: jwksOf(z, bundle), schemes };
  const problem = await signatureProblem(input, raw.headers, raw.content, Math.floor(Date.now() / 1000));
  if (problem) throw new z.errors.HaltedError(`The webhook's signature did not verify: ${problem}.`);
  const event = bundle.cleanedRequest || {};
  if (!selectedEvents(bundle).includes(event.type)) return [];
  const [id, timestamp] = [header(raw.headers, "webhook-id"), header(raw.headers, "webhook-timestamp")];
  if (!firstDelivery(id, timestamp, Date.now())) return [];
  return [asItem(event)];
};

/**
 * Samples for the Zap editor: the latest finished tasks' events from the pull feed
 * (GET /openapi/v1/events, oldest first), newest first. The feed is read at most 10 pages deep.
 */
const performList = async (z, bundle) => {
  const types = selectedEvents(bundle);
  const found = [];
  let after;
  for (let page = 0; page < 10; page++) {
    const params = after ? { limit: 100, after } : { limit: 100 };
    const response = await z.request({ url: api(bundle, "/openapi/v1/events"), params });
    const events = response.data.data || [];
    for (const event of events) if (types.includes(event.type)) found.push(asItem(event));
    after = response.data.next_cursor;
    if (events.length < 100 || !after) break;
  }
  return found.reverse().slice(0, 10);
};

module.exports = {
  key: "task_finished",
  noun: "Task",
  display: {
    label: "Task Finished",
    description: "Triggers instantly when a generation task succeeds, fails or is canceled.",
  },
  operation: {
    type: "hook",
    inputFields: [
      {
        key: "events",
        label: "Outcomes",
        list: true,
        required: false,
        choices: { "task.succeeded": "Succeeded", "task.failed": "Failed", "task.canceled": "Canceled" },
        helpText: "Which outcomes start the Zap. Leave empty for all three.",
      },
    ],
    performSubscribe,
    performUnsubscribe,
    perform,
    performList,
    sample,
    outputFields: [
      { key: "id", label: "Event ID" },
      { key: "type", label: "Event Type" },
      { key: "timestamp", label: "Event Time", type: "datetime" },
      { key: "data__id", label: "Task ID" },
      { key: "data__status", label: "Task Status" },
      { key: "data__model", label: "Model" },
      { key: "data__error__code", label: "Error Code" },
      { key: "data__usage__points_charged", label: "Points Charged", type: "integer" },
    ],
  },
};
