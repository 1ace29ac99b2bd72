import { newId } from "../ids.js";
import { DEFAULT_ENDPOINT_EVENTS, ENDPOINT_EVENT_TYPES } from "../store/endpoint-fanout.js";
import type { WebhookEndpointRow } from "../store/rows.js";
import { destinationHost } from "../webhooks/destination.js";
import { validateCallbackUrl } from "../net/address-guard.js";
import { callbackHeaderProblems } from "./callback-headers.js";
import { sealHeaders } from "../webhooks/callback-headers.js";
import type { ServiceDeps } from "./deps.js";
import {
  type QueueEndpointInput,
  type QueueEndpointShown,
  queueEndpointFields,
  queueEndpointShown,
} from "./queue-endpoints.js";
import { ApiError } from "./errors.js";

/**
 * Endpoints (docs/contract.md, "Endpoints"): URLs a client subscribes to its events, as Svix and
 * the REST-hook platforms (n8n triggers, Zapier's REST hooks, Make's instant triggers) expect.
 * Every event of the client's tasks whose type an endpoint subscribes to is delivered to it as
 * its own destination (the store writes one delivery row per endpoint with the event); this is
 * the API's side: checks, ids and what is shown.
 */
export type EndpointEventType = (typeof ENDPOINT_EVENT_TYPES)[number];

/** The most endpoints one client may have. */
export const MAX_ENDPOINTS = 20;
export const MAX_DESCRIPTION = 500;

interface CommonInput {
  events?: EndpointEventType[] | undefined;
  description?: string | null | undefined;
}

type WebhookInput = CommonInput & {
  type?: "webhook" | undefined;
  url: string;
  headers?: Record<string, string> | null | undefined;
};

export type EndpointInput = WebhookInput | (CommonInput & QueueEndpointInput);

const isQueueInput = (input: EndpointInput): input is CommonInput & QueueEndpointInput =>
  input.type === "amqp" || input.type === "nats" || input.type === "sqs";

/**
 * What the API shows of an endpoint: never its headers' values (nor their names, as for a task's),
 * never a queue endpoint's credentials (its url without them, and its other settings).
 */
export type EndpointView = {
  id: string;
  url: string;
  events: EndpointEventType[];
  description: string | null;
  created_at: string;
} & ({ type?: never } | QueueEndpointShown);

type Deps = Pick<ServiceDeps, "store" | "clock" | "config">;

export function endpointView(row: WebhookEndpointRow): EndpointView {
  const shown = queueEndpointShown(row);
  return {
    id: row.id,
    // An SQS endpoint's address is its queue URL under the kind's scheme (sqs+https://…): shown as the queue URL.
    url: shown?.type === "sqs" ? shown.queue_url : row.url,
    events: JSON.parse(row.events) as EndpointEventType[],
    description: row.description,
    created_at: new Date(row.createdAt).toISOString(),
    // A `webhook` endpoint shows the fields it always has (no `type`); a queue one its kind and settings.
    ...shown,
  };
}

/** Where an endpoint delivers: a callback URL (checked as callback_url is), or a queue's settings. */
function endpointTarget(deps: Deps, input: EndpointInput) {
  if (isQueueInput(input)) return queueEndpointFields(deps, input);
  const verdict = validateCallbackUrl(input.url, { allowPrivateNetworks: deps.config.webhookAllowPrivateNetworks });
  if (!verdict.ok) {
    throw new ApiError("invalid_callback_url", `url is not acceptable: ${verdict.reason}.`, [
      { field: "url", message: verdict.reason },
    ]);
  }
  const problems = callbackHeaderProblems(input.headers, "headers");
  if (problems.length > 0) throw new ApiError("validation_error", "Some headers are invalid.", problems);
  return {
    url: verdict.url,
    destinationHost: destinationHost(verdict.url),
    kind: "webhook",
    headers: sealHeaders(input.headers, deps.config.encryptionKey),
  };
}

/**
 * Creates an endpoint: a `webhook` one's URL passes the callback URL checks and its headers the
 * callback_headers rules; a queue one's settings the checks of services/queue-endpoints.ts.
 */
export async function createEndpoint(deps: Deps, clientId: string, input: EndpointInput): Promise<EndpointView> {
  const target = endpointTarget(deps, input);
  const events = input.events ? [...new Set(input.events)] : [...DEFAULT_ENDPOINT_EVENTS];
  const unknown = events.filter((e) => !(ENDPOINT_EVENT_TYPES as readonly string[]).includes(e));
  if (events.length === 0 || unknown.length > 0)
    throw new ApiError("validation_error", `events must be a non-empty list of ${ENDPOINT_EVENT_TYPES.join(", ")}.`, [
      { field: "events", message: `one or more of ${ENDPOINT_EVENT_TYPES.join(", ")}` },
    ]);
  const description = input.description ?? null;
  if (description !== null && description.length > MAX_DESCRIPTION)
    throw new ApiError("validation_error", "description is too long.", [
      { field: "description", message: `at most ${MAX_DESCRIPTION} characters` },
    ]);
  const now = deps.clock.now();
  const row = await deps.store.webhookEndpoints.create(
    {
      id: newId("ep", now),
      clientId,
      ...target,
      events: JSON.stringify(events),
      description,
      createdAt: now,
    },
    MAX_ENDPOINTS,
  );
  if (!row)
    throw new ApiError("validation_error", `A client has at most ${MAX_ENDPOINTS} endpoints; delete one first.`, [
      { field: "url", message: `at most ${MAX_ENDPOINTS} endpoints` },
    ]);
  return endpointView(row);
}

export async function listEndpoints(deps: Pick<Deps, "store">, clientId: string): Promise<EndpointView[]> {
  return (await deps.store.webhookEndpoints.list(clientId)).map(endpointView);
}

/** The client's endpoint; another client's answers as an unknown one (404). */
export async function getEndpoint(deps: Pick<Deps, "store">, clientId: string, id: string): Promise<EndpointView> {
  const row = await deps.store.webhookEndpoints.find(clientId, id);
  if (!row) throw new ApiError("not_found", "No such endpoint.");
  return endpointView(row);
}

/**
 * Removes the client's endpoint; its pending deliveries end (delivered ones stay in the attempt log),
 * and the workers let go of what they hold for them (Nudges.endpointRemoved).
 */
export async function deleteEndpoint(
  deps: Pick<ServiceDeps, "store" | "clock" | "nudges">,
  clientId: string,
  id: string,
): Promise<void> {
  if (!(await deps.store.webhookEndpoints.remove(clientId, id, deps.clock.now())))
    throw new ApiError("not_found", "No such endpoint.");
  deps.nudges.endpointRemoved?.(clientId);
}
