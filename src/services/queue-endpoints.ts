import { openSecret, sealSecret } from "../crypto.js";
import type { QueueKind, QueueTarget } from "../destinations/queues.js";
import type { WebhookEndpointRow } from "../store/rows.js";
import { hostnameRefusal, MAX_CALLBACK_URL_LENGTH } from "../net/address-guard.js";
import type { ServiceDeps } from "./deps.js";
import { ApiError, type FieldProblem } from "./errors.js";
import { LRUCache } from "lru-cache";

/**
 * Queue endpoints (docs/destinations.md): an endpoint whose `type` is `amqp`, `nats` or `sqs`.
 * Checked at creation (each bad field named, 422), stored with an address that names the kind and
 * the broker without credentials, and its settings as JSON: what the API shows in the clear, the
 * whole target (credentials included) sealed with RELAY_ENCRYPTION_KEY like `headers`.
 */
export interface QueueEndpointInput {
  type: QueueKind;
  url?: string | undefined;
  exchange?: string | undefined;
  routing_key?: string | null | undefined;
  subject?: string | null | undefined;
  token?: string | null | undefined;
  credentials?: string | null | undefined;
  queue_url?: string | undefined;
  region?: string | undefined;
  access_key_id?: string | undefined;
  secret_access_key?: string | undefined;
  endpoint?: string | null | undefined;
}

/** What the API shows of a queue endpoint, besides id, url, events, description and created_at. */
export type QueueEndpointShown =
  | { type: "amqp"; exchange: string; routing_key: string | null }
  | { type: "nats"; subject: string | null }
  | { type: "sqs"; queue_url: string; region: string; access_key_id: string; endpoint: string | null };

/** The `destination` column: shown fields in the clear, the target sealed. */
interface StoredDestination {
  shown: QueueEndpointShown;
  sealed: string;
}

export interface QueueEndpointRowFields {
  url: string;
  destinationHost: string;
  kind: QueueKind;
  destination: string;
}

type Deps = Pick<ServiceDeps, "config">;

const DEFAULT_PORTS: Record<string, string> = { "amqp:": "5672", "amqps:": "5671", "nats:": "4222", "tls:": "4222" };
/** A NATS subject to publish on: dot-separated tokens, no wildcards or whitespace. */
const NATS_SUBJECT = /^[^.\s*>]+(?:\.[^.\s*>]+)*$/;
const AMQP_NAME = /^[\w.:/-]*$/;
const AWS_REGION = /^[a-z]{2}(?:-[a-z]+)+-\d+$/;

/** A broker URL's problem, or its parsed form: the scheme the kind takes, a host, and the address guard. */
function brokerUrl(
  raw: string | undefined,
  field: string,
  schemes: readonly string[],
  deps: Deps,
  problems: FieldProblem[],
): URL | null {
  const fail = (message: string) => {
    problems.push({ field, message });
    return null;
  };
  if (raw === undefined || raw === "") return fail("is required");
  if (raw.length > MAX_CALLBACK_URL_LENGTH) return fail(`at most ${MAX_CALLBACK_URL_LENGTH} characters`);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return fail("is not an absolute URL");
  }
  if (!schemes.includes(url.protocol)) return fail(`scheme must be ${schemes.map((s) => `${s}//`).join(" or ")}`);
  if (url.hostname === "") return fail("has no host");
  if (url.search !== "" || url.hash !== "") return fail("takes no query or fragment");
  if (!deps.config.webhookAllowPrivateNetworks) {
    const refusal = hostnameRefusal(url.hostname);
    if (refusal !== null)
      return fail(`${refusal}; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)`);
  }
  return url;
}

const hostOf = (url: URL) => `${url.hostname}:${url.port || DEFAULT_PORTS[url.protocol] || ""}`;

/** The URL without its credentials: what the endpoint's `url` shows and its address is. */
function withoutCredentials(url: URL): string {
  const copy = new URL(url.href);
  copy.username = "";
  copy.password = "";
  return copy.href.replace(/\/$/, "");
}

/**
 * Checks a queue endpoint's settings and builds its stored fields; every bad field is named in
 * one 422 `validation_error`.
 */
export function queueEndpointFields(deps: Deps, input: QueueEndpointInput): QueueEndpointRowFields {
  const problems: FieldProblem[] = [];
  const key = deps.config.encryptionKey;
  const done = (url: string, host: string, shown: QueueEndpointShown, target: QueueTarget): QueueEndpointRowFields => {
    if (problems.length > 0)
      throw new ApiError("validation_error", `Some ${input.type} settings are invalid.`, problems);
    const stored: StoredDestination = { shown, sealed: sealSecret(JSON.stringify(target), key) };
    return { url, destinationHost: host, kind: input.type, destination: JSON.stringify(stored) };
  };
  if (input.type === "amqp") {
    const url = brokerUrl(input.url, "url", ["amqp:", "amqps:"], deps, problems);
    const exchange = input.exchange ?? "";
    if (input.exchange === undefined) problems.push({ field: "exchange", message: "is required" });
    else if (exchange.length > 255 || !AMQP_NAME.test(exchange))
      problems.push({ field: "exchange", message: "at most 255 letters, digits, '-', '_', '.', ':' or '/'" });
    const routingKey = input.routing_key ?? null;
    if (routingKey !== null && Buffer.byteLength(routingKey) > 255)
      problems.push({ field: "routing_key", message: "at most 255 bytes" });
    return done(
      url ? withoutCredentials(url) : "",
      url ? hostOf(url) : "",
      { type: "amqp", exchange, routing_key: routingKey },
      { kind: "amqp", amqp: { url: url?.href ?? "", exchange, routingKey } },
    );
  }
  if (input.type === "nats") {
    const url = brokerUrl(input.url, "url", ["nats:", "tls:"], deps, problems);
    const subject = input.subject ?? null;
    if (subject !== null && (subject.length > 255 || !NATS_SUBJECT.test(subject)))
      problems.push({ field: "subject", message: "a subject: dot-separated tokens, no wildcards (* >) or whitespace" });
    const creds = input.credentials ?? null;
    if (creds !== null && !/-----BEGIN NATS USER JWT-----[\s\S]+-----BEGIN USER NKEY SEED-----/.test(creds))
      problems.push({ field: "credentials", message: "a NATS .creds file's text (user JWT and NKey seed)" });
    return done(
      url ? withoutCredentials(url) : "",
      url ? hostOf(url) : "",
      { type: "nats", subject },
      { kind: "nats", nats: { url: url?.href ?? "", subject, token: input.token ?? null, creds } },
    );
  }
  const schemes = deps.config.webhookAllowPrivateNetworks ? ["https:", "http:"] : ["https:"];
  const queueUrl = brokerUrl(input.queue_url, "queue_url", schemes, deps, problems);
  const endpoint = input.endpoint ? brokerUrl(input.endpoint, "endpoint", schemes, deps, problems) : null;
  const region = input.region ?? "";
  if (!AWS_REGION.test(region)) problems.push({ field: "region", message: "an AWS region such as eu-west-1" });
  if (!input.access_key_id || !/^[A-Za-z0-9]{1,128}$/.test(input.access_key_id))
    problems.push({ field: "access_key_id", message: "an access key id: 1 to 128 letters and digits" });
  if (!input.secret_access_key || input.secret_access_key.length > 128)
    problems.push({ field: "secret_access_key", message: "a secret access key of 1 to 128 characters" });
  const requests = endpoint ?? queueUrl;
  const queue = queueUrl?.href ?? "";
  return done(
    `sqs+${queue}`,
    requests ? `${requests.hostname}:${requests.port || (requests.protocol === "http:" ? "80" : "443")}` : "",
    {
      type: "sqs",
      queue_url: queue,
      region,
      access_key_id: input.access_key_id ?? "",
      endpoint: endpoint?.origin ?? null,
    },
    {
      kind: "sqs",
      sqs: {
        queueUrl: queue,
        region,
        accessKeyId: input.access_key_id ?? "",
        secretAccessKey: input.secret_access_key ?? "",
        endpoint: endpoint?.origin ?? null,
      },
    },
  );
}

/** The shown settings of a queue endpoint's row (never its credentials); null for a `webhook` one. */
export function queueEndpointShown(row: Pick<WebhookEndpointRow, "destination">): QueueEndpointShown | null {
  return row.destination ? (JSON.parse(row.destination) as StoredDestination).shown : null;
}

/** The endpoint's target with its credentials, for the destination that sends to it. */
export function openQueueTarget(row: Pick<WebhookEndpointRow, "destination">, key: Buffer | null): QueueTarget | null {
  if (!row.destination) return null;
  return JSON.parse(openSecret((JSON.parse(row.destination) as StoredDestination).sealed, key)) as QueueTarget;
}

/**
 * The queue kinds' lookup of an endpoint's target by client and id, cached: an endpoint's
 * settings never change (a new configuration is a new endpoint), and a removed one's deliveries end.
 */
export function queueTargets(
  deps: Pick<ServiceDeps, "store" | "config">,
  max = 1_000,
): (tenant: string, endpointId: string) => Promise<QueueTarget | null> {
  const cache = new LRUCache<string, QueueTarget>({ max });
  return async (tenant, endpointId) => {
    const key = `${tenant}|${endpointId}`;
    const hit = cache.get(key);
    if (hit) return hit;
    const row = await deps.store.webhookEndpoints.find(tenant, endpointId);
    const target = row ? openQueueTarget(row, deps.config.encryptionKey) : null;
    if (target) cache.set(key, target);
    return target;
  };
}
