"use strict";

const { ENDPOINTS, TERMINAL_EVENTS, api } = require("../lib/api");
const { signatureProblem } = require("../lib/signature");
const sample = require("./task_finished.sample.json");

/** The outcomes the Zap listens to: all three terminal events unless the user picked some. */
const selectedEvents = (bundle) => {
  const picked = [].concat(bundle.inputData?.events || []).filter((e) => TERMINAL_EVENTS.includes(e));
  return (picked.length > 0 ? [...new Set(picked)] : [...TERMINAL_EVENTS]).sort();
};

/** A webhook body as Zapier keeps it: the event's id, type and timestamp, and the task as `data`. */
const asItem = (event) => ({ id: event.id, type: event.type, timestamp: event.timestamp, data: event.data });

/** Turning the Zap on subscribes its hook URL as an endpoint of the connected client. */
const performSubscribe = async (z, bundle) => {
  const response = await z.request({
    url: api(bundle, ENDPOINTS),
    method: "POST",
    body: { url: bundle.targetUrl, events: selectedEvents(bundle), description: "Zapier: Task finished" },
  });
  return response.data.data; // kept by Zapier as bundle.subscribeData
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
 * A webhook arrived at the Zap's hook URL. With a webhook secret or a client ID in the connection,
 * its signature is checked on the raw body first (`v1` HMAC with the secret, `v1a` Ed25519 with the
 * client's published keys; any one listed that verifies passes), and a webhook that fails stops the
 * run (the Zap's history shows why) instead of starting it with data nobody can vouch for.
 */
const perform = async (z, bundle) => {
  const secret = bundle.authData?.webhook_secret;
  const jwks = jwksOf(z, bundle);
  if (secret || jwks) {
    const raw = bundle.rawRequest || {};
    const problem = await signatureProblem({ secret, jwks }, raw.headers, raw.content, Math.floor(Date.now() / 1000));
    if (problem) throw new z.errors.HaltedError(`The webhook's signature did not verify: ${problem}.`);
  }
  const event = bundle.cleanedRequest || {};
  if (!selectedEvents(bundle).includes(event.type)) return [];
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
