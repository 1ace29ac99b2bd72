import type { Context, Hono, MiddlewareHandler } from "hono";
import { callbackUrls, hourlyTasks } from "../../services/dashboard.js";
import { ApiError } from "../../services/errors.js";
import {
  createEndpoint,
  deleteEndpoint,
  type EndpointEventType,
  type EndpointInput,
  listEndpoints,
} from "../../services/webhook-endpoints.js";
import { ENDPOINT_EVENT_TYPES } from "../../store/endpoint-fanout.js";
import { destinationHost } from "../../webhooks/destination.js";
import { render, type DashboardDeps } from "./render.js";
import type { DashEnv } from "./session.js";
import { usageBody } from "./views-usage.js";
import {
  DRAFT_FIELDS,
  ENDPOINT_KINDS,
  type EndpointDraft,
  type EndpointKind,
  webhooksBody,
  type WebhooksView,
} from "./views-webhooks.js";

const DAY_MS = 24 * 60 * 60 * 1000;

type Field = (name: string) => string;

/** What the add form keeps when refused: every field but the secrets (password inputs). */
function endpointDraft(text: Field, events: EndpointEventType[]): EndpointDraft {
  const kind = text("type");
  const draft: EndpointDraft = {
    type: (ENDPOINT_KINDS as readonly string[]).includes(kind) ? (kind as EndpointKind) : "webhook",
    description: text("description"),
    events,
  };
  for (const name of DRAFT_FIELDS) draft[name] = text(name);
  return draft;
}

/** A broker URL with the user and password of their own (password) inputs, when given. */
function withUserinfo(raw: string, user: string, password: string): string {
  if (!user && !password) return raw;
  try {
    const url = new URL(raw);
    if (user) url.username = user;
    if (password) url.password = password;
    return url.href;
  } catch {
    return raw; // the service names the bad URL
  }
}

/** The API's endpoint input for the kind picked: the form's fields of that kind, empty ones left out. */
function endpointTargetOf(kind: EndpointKind, text: Field): EndpointInput {
  const opt = (name: string) => text(name) || undefined;
  if (kind === "amqp")
    return {
      type: "amqp",
      url: withUserinfo(text("amqp_url"), text("amqp_user"), text("amqp_password")),
      exchange: text("exchange"),
      routing_key: opt("routing_key") ?? null,
    };
  if (kind === "nats")
    return {
      type: "nats",
      url: withUserinfo(text("nats_url"), text("nats_user"), text("nats_password")),
      subject: opt("subject") ?? null,
      token: opt("nats_token") ?? null,
    };
  if (kind === "sqs")
    return {
      type: "sqs",
      queue_url: text("queue_url"),
      region: text("region"),
      access_key_id: text("access_key_id"),
      secret_access_key: text("secret_access_key"),
      endpoint: opt("sqs_endpoint") ?? null,
    };
  return { url: text("url") };
}

/** `datetime-local` sends no zone ("2026-01-01T12:00"); the label says UTC, so read it as UTC. */
export function parseSince(value: string): number | null {
  const v = value.trim();
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}/.test(v)) return null;
  const ms = Date.parse(/(Z|[+-]\d{2}:\d{2})$/i.test(v) ? v : `${v}Z`);
  return Number.isFinite(ms) ? ms : null;
}

const localUtc = (ms: number) => new Date(ms).toISOString().slice(0, 16);

export function registerWebhookPages(app: Hono<DashEnv>, deps: DashboardDeps, auth: MiddlewareHandler<DashEnv>): void {
  const show = async (c: Context<DashEnv>, extra: Partial<WebhooksView> = {}, status = 200) => {
    const clientId = c.get("client").id;
    const { store } = deps;
    // Failing hosts first (longest failing first), then the hosts of the client's recent callbacks.
    const failing = await store.keyHealth.failingOf(clientId);
    const endpoints = await listEndpoints(deps, clientId);
    const names = [
      ...new Set([
        ...failing.map((f) => f.host),
        ...(await callbackUrls(deps, clientId)).map(destinationHost),
        // A queue endpoint's broker shows here once it fails (its key is the broker's host, not its URL's).
        ...endpoints.filter((e) => e.type === undefined).map((e) => destinationHost(e.url)),
      ]),
    ];
    const byHost = new Map(failing.map((f) => [f.host, f]));
    const hosts = await Promise.all(
      names.map(async (host) => ({
        host,
        failing: byHost.get(host) ?? null,
        pending: await store.events.pendingOfKey({ clientId, host }),
      })),
    );
    const view: WebhooksView = {
      csrf: c.get("session").csrfToken,
      now: deps.clock.now(),
      hosts,
      endpoints,
      health: deps.hostHealth ? deps.hostHealth(clientId, names) : null,
      retrying: await store.events.retryingOfClient(clientId),
      defaultSince: localUtc(deps.clock.now() - DAY_MS),
      ...extra,
    };
    return render(c, deps, { title: "Webhooks", section: "webhooks", body: webhooksBody(view), status });
  };
  const form = async (c: Context<DashEnv>, name: string) => {
    const value = (await c.req.parseBody())[name];
    return typeof value === "string" ? value : "";
  };
  /** A refusal from a service (bad URL, rate limit) is shown on the page with the API's status. */
  const orError = async (
    c: Context<DashEnv>,
    extra: Partial<WebhooksView>,
    run: () => Promise<Partial<WebhooksView>> | Partial<WebhooksView>,
  ) => {
    try {
      return show(c, { ...extra, ...(await run()) });
    } catch (err) {
      if (err instanceof ApiError) return show(c, { ...extra, error: err.message }, err.status);
      throw err;
    }
  };

  app.get("/webhooks", auth, (c) => show(c));

  app.post("/webhooks/test", auth, async (c) => {
    const url = (await form(c, "url")).trim();
    return orError(c, { testUrl: url }, async () => ({
      ping: await deps.deliveries.testWebhook(c.get("client").id, url),
    }));
  });

  // Endpoints: the same services as POST and DELETE /openapi/v1/webhooks/endpoints (a refusal is
  // shown on the page with the API's status, the form keeping what was typed but never a secret).
  app.post("/webhooks/endpoints", auth, async (c) => {
    const body = await c.req.parseBody({ all: true });
    const text = (name: string) => (typeof body[name] === "string" ? (body[name] as string).trim() : "");
    const picked = ([] as unknown[]).concat(body.events ?? []).filter((e): e is string => typeof e === "string");
    const events = ENDPOINT_EVENT_TYPES.filter((e) => picked.includes(e));
    const draft = endpointDraft(text, events);
    return orError(c, { endpointDraft: draft }, async () => ({
      endpointAdded: await createEndpoint(deps, c.get("client").id, {
        ...endpointTargetOf(draft.type, text),
        events: events.length > 0 ? [...events] : undefined,
        description: draft.description || null,
      }),
      endpointDraft: undefined,
    }));
  });

  app.post("/webhooks/endpoints/delete", auth, async (c) => {
    const id = (await form(c, "id")).trim();
    return orError(c, {}, async () => {
      await deleteEndpoint(deps, c.get("client").id, id);
      return { endpointRemoved: id };
    });
  });

  app.post("/webhooks/rotate", auth, (c) =>
    orError(c, {}, async () => {
      const rotated = await deps.deliveries.rotateSecret(c.get("client").id);
      if ("public_key" in rotated)
        return {
          rotatedKey: { publicKey: rotated.public_key, previousExpiresAt: Date.parse(rotated.previous_key_expires_at) },
        };
      return {
        rotated: { secret: rotated.webhook_secret, previousExpiresAt: Date.parse(rotated.previous_secret_expires_at) },
      };
    }),
  );

  // The callback-hosts table's Retry now: the same service as POST /openapi/v1/webhooks/hosts/{host}/retry
  // (its refusals, a bad host or 429 rate_limit, are shown on the page with the API's status).
  app.post("/webhooks/hosts/retry", auth, async (c) => {
    const host = (await form(c, "host")).trim();
    return orError(c, {}, async () => ({ retried: await deps.deliveries.retryHost(c.get("client").id, host) }));
  });

  app.post("/webhooks/recover", auth, async (c) => {
    const since = parseSince(await form(c, "since"));
    if (since === null) return show(c, { error: "Give the time as YYYY-MM-DDTHH:MM (UTC)." }, 400);
    return orError(c, {}, async () => ({
      recovered: (await deps.deliveries.recover(c.get("client").id, since)).requeued,
    }));
  });

  app.get("/usage", auth, async (c) => {
    const clientId = c.get("client").id;
    const usage = await deps.deliveries.usage(clientId);
    const { hours, counts } = await hourlyTasks(deps, clientId);
    return render(c, deps, { title: "Usage", section: "usage", body: usageBody(usage, hours, counts) });
  });
}
