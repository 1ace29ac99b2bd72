import type { Context, Hono, MiddlewareHandler } from "hono";
import { callbackUrls, hourlyTasks } from "../../services/dashboard.js";
import { ApiError } from "../../services/errors.js";
import {
  createEndpoint,
  deleteEndpoint,
  ENDPOINT_EVENT_TYPES,
  type EndpointEventType,
  listEndpoints,
} from "../../services/webhook-endpoints.js";
import { destinationHost } from "../../webhooks/destination.js";
import { render, type DashboardDeps } from "./render.js";
import type { DashEnv } from "./session.js";
import { usageBody } from "./views-usage.js";
import { webhooksBody, type WebhooksView } from "./views-webhooks.js";

const DAY_MS = 24 * 60 * 60 * 1000;

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
    const failing = await store.endpoints.failingOf(clientId);
    const endpoints = await listEndpoints(deps, clientId);
    const names = [
      ...new Set([
        ...failing.map((f) => f.host),
        ...(await callbackUrls(deps, clientId)).map(destinationHost),
        ...endpoints.map((e) => destinationHost(e.url)),
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
  // shown on the page with the API's status, the form keeping what was typed).
  app.post("/webhooks/endpoints", auth, async (c) => {
    const body = await c.req.parseBody({ all: true });
    const text = (name: string) => (typeof body[name] === "string" ? (body[name] as string).trim() : "");
    const picked = ([] as unknown[]).concat(body.events ?? []).filter((e): e is string => typeof e === "string");
    const events = ENDPOINT_EVENT_TYPES.filter((e) => picked.includes(e));
    const draft = { url: text("url"), description: text("description"), events: events as EndpointEventType[] };
    return orError(c, { endpointDraft: draft }, async () => ({
      endpointAdded: await createEndpoint(deps, c.get("client").id, {
        url: draft.url,
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
