"use strict";

/** The endpoints API: REST-hook subscriptions of the caller's task events. */
const ENDPOINTS = "/openapi/v1/webhooks/endpoints";

/** The three events that end a task; a "Task finished" subscription listens to these (or some of them). */
const TERMINAL_EVENTS = ["task.succeeded", "task.failed", "task.canceled"];

/** An absolute URL of the connected relay's API. */
const api = (bundle, path) => `${String(bundle.authData.base_url).trim().replace(/\/+$/, "")}${path}`;

/** A task read ({"data":{…},"output","usage"}) flattened as a webhook's `data` is: its fields, output and usage. */
const flattenTask = (body) => ({ ...(body.data || {}), output: body.output ?? null, usage: body.usage ?? null });

/** Every request carries the connection's API key; the relay answers 401 invalid_api_key without it. */
const includeApiKey = (request, _z, bundle) => {
  if (bundle.authData?.api_key) {
    request.headers = { ...request.headers, Authorization: `Bearer ${bundle.authData.api_key}` };
  }
  return request;
};

/** Turns the relay's error envelope ({"error":{"code","message","request_id"}}) into the message Zapier shows. */
const explainErrors = (response, z) => {
  if (response.status < 400 || response.skipThrowForStatus) return response;
  const error = response.data?.error || {};
  const message = [
    `${error.code || `HTTP ${response.status}`}: ${error.message || "the relay refused the request"}`,
    error.request_id ? ` (request ${error.request_id})` : "",
  ].join("");
  if (response.status === 401) throw new z.errors.Error(message, "AuthenticationError", response.status);
  throw new z.errors.Error(message, error.code || "ApiError", response.status);
};

module.exports = { ENDPOINTS, TERMINAL_EVENTS, api, flattenTask, includeApiKey, explainErrors };
