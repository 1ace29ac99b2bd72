import { readFileSync } from "node:fs";
import { systemClock } from "../clock.js";
import { createClient, revokeClient, rotateSecret, updateClientLimits } from "../services/clients.js";
import { out, parse, positionalsAtMost, UsageError } from "./common.js";
import { ApiError } from "../services/errors.js";
import { updateWebhookSettings, type WebhookSettingsInput } from "../services/webhook-settings.js";
import { cliLifecycle, type CliContext } from "./context.js";
import { runClientStorage } from "./storage.js";

function limitArg(value: string | undefined, name: string): number | null | undefined {
  if (value === undefined) return undefined;
  if (value === "none") return null;
  if (!/^\d+$/.test(value)) throw new UsageError(`--${name} must be a whole number or "none"`);
  return Number(value);
}

function readUpstreamKey(
  values: { "upstream-key-env"?: string | undefined; "upstream-key-stdin"?: boolean | undefined },
  env: NodeJS.ProcessEnv,
): string | null {
  if (values["upstream-key-env"]) {
    const key = env[values["upstream-key-env"]];
    if (!key) throw new UsageError(`environment variable ${values["upstream-key-env"]} is empty or unset`);
    return key.trim();
  }
  if (values["upstream-key-stdin"]) {
    const key = readFileSync(0, "utf8").trim();
    if (!key) throw new UsageError("no upstream key on standard input");
    return key;
  }
  return null;
}

/** `clients update` flags for the webhook settings (same rules as PUT /openapi/v1/webhooks/settings). */
function webhookSettingsArgs(values: {
  "notification-url"?: string | undefined;
  "callback-header"?: string[] | undefined;
  "clear-callback-headers"?: boolean | undefined;
  signature?: string | undefined;
}): WebhookSettingsInput {
  const input: WebhookSettingsInput = {};
  if (values["notification-url"] !== undefined)
    input.notification_url = values["notification-url"] === "none" ? null : values["notification-url"];
  if (values["clear-callback-headers"]) input.callback_headers = null;
  if (values["callback-header"]?.length) {
    if (values["clear-callback-headers"])
      throw new UsageError("give --callback-header or --clear-callback-headers, not both");
    input.callback_headers = {};
    for (const pair of values["callback-header"]) {
      const at = pair.indexOf("=");
      if (at <= 0) throw new UsageError("--callback-header takes NAME=VALUE");
      input.callback_headers[pair.slice(0, at).trim()] = pair.slice(at + 1).trim();
    }
  }
  if (values.signature !== undefined) {
    if (values.signature !== "hmac" && values.signature !== "ed25519")
      throw new UsageError('--signature must be "hmac" or "ed25519"');
    input.signature = values.signature;
  }
  return input;
}

function requireId(positionals: string[], command: string): string {
  const id = positionals[0];
  if (!id) throw new UsageError(`${command} needs a client id`);
  positionalsAtMost(positionals, 1, command);
  return id;
}

/** `clients <sub>`: create, list, update, revoke, rotate-secret. */
export async function runClients(sub: string, args: string[], ctx: CliContext): Promise<number> {
  if (sub === "storage") return runClientStorage(args, ctx);
  const { values, positionals } = parse(args, {
    name: { type: "string" },
    json: { type: "boolean" },
    "max-waiting": { type: "string" },
    "max-running": { type: "string" },
    "credit-limit": { type: "string" },
    "upstream-key-env": { type: "string" },
    "upstream-key-stdin": { type: "boolean" },
    "notification-url": { type: "string" },
    "callback-header": { type: "string", multiple: true },
    "clear-callback-headers": { type: "boolean" },
    signature: { type: "string" },
  });
  switch (sub) {
    case "create": {
      positionalsAtMost(positionals, 0, "clients create");
      if (!values.name?.trim()) throw new UsageError("clients create needs --name NAME");
      const upstreamKey = readUpstreamKey(values, ctx.env);
      if (upstreamKey && !ctx.config.encryptionKey)
        throw new UsageError("set RELAY_ENCRYPTION_KEY (32 bytes, base64) to store a client's own upstream key");
      const maxWaiting = limitArg(values["max-waiting"], "max-waiting") ?? null;
      const maxRunning = limitArg(values["max-running"], "max-running") ?? null;
      const creditLimit = limitArg(values["credit-limit"], "credit-limit") ?? null;
      const { client, apiKey, webhookSecret } = await createClient(
        { store: await ctx.store(), clock: systemClock },
        {
          name: values.name.trim(),
          upstreamKey,
          encryptionKey: ctx.config.encryptionKey,
          maxWaiting,
          maxRunning,
          creditLimit,
        },
      );
      if (values.json) {
        out(JSON.stringify({ id: client.id, name: client.name, api_key: apiKey, webhook_secret: webhookSecret }));
      } else {
        out(`created client ${client.id} (${client.name})`);
        out(`api key:        ${apiKey}`);
        out(`webhook secret: ${webhookSecret}`);
        out("The API key is shown only now: store it safely.");
      }
      return 0;
    }
    case "list": {
      positionalsAtMost(positionals, 0, "clients list");
      const store = await ctx.store();
      const rows = [];
      for (const c of await store.clients.list()) {
        const credits = (await store.clients.creditPosition(c.id))!;
        rows.push({
          id: c.id,
          name: c.name,
          key_prefix: `${c.apiKeyPrefix}…`,
          status: c.revokedAt === null ? "active" : "revoked",
          upstream_account: c.upstreamAccount,
          max_waiting: c.maxWaiting,
          max_running: c.maxRunning,
          credit_limit: c.creditLimit,
          points_charged: credits.charged,
          points_refunded: credits.refunded,
          points_reserved: credits.reserved,
          points_spent: credits.charged - credits.refunded,
          created_at: new Date(c.createdAt).toISOString(),
        });
      }
      if (values.json) out(JSON.stringify(rows));
      else if (rows.length === 0) out("no clients yet: npm run cli -- clients create --name NAME");
      else
        for (const r of rows)
          out(
            `${r.id}  ${r.status.padEnd(7)}  ${r.key_prefix}  spent=${r.points_spent}${r.credit_limit !== null ? `/${r.credit_limit}` : ""} reserved=${r.points_reserved}  ${r.name}`,
          );
      return 0;
    }
    case "update": {
      const id = requireId(positionals, "clients update");
      const limits = {
        maxWaiting: limitArg(values["max-waiting"], "max-waiting"),
        maxRunning: limitArg(values["max-running"], "max-running"),
        creditLimit: limitArg(values["credit-limit"], "credit-limit"),
      };
      const store = await ctx.store();
      const changes = { ...(values.name?.trim() ? { name: values.name.trim() } : {}), ...limits };
      const limitsGiven = Object.values(changes).some((v) => v !== undefined);
      const updated = limitsGiven ? await updateClientLimits({ store }, id, changes) : await store.clients.find(id);
      if (!updated) throw new UsageError(`no client ${id}`);
      const settings = webhookSettingsArgs(values);
      let shown = null;
      if (Object.keys(settings).length > 0) {
        try {
          shown = await updateWebhookSettings({ store, clock: systemClock, config: ctx.config }, id, settings);
        } catch (err) {
          if (err instanceof ApiError)
            throw new UsageError(`${err.message}${err.details ? ` ${JSON.stringify(err.details)}` : ""}`);
          throw err;
        }
      }
      if (values.json) {
        out(
          JSON.stringify({
            id: updated.id,
            name: updated.name,
            max_waiting: updated.maxWaiting,
            max_running: updated.maxRunning,
            credit_limit: updated.creditLimit,
            ...(shown ? { webhooks: shown } : {}),
          }),
        );
        return 0;
      }
      out(
        `updated ${updated.id}: max_waiting=${updated.maxWaiting ?? "none"} max_running=${updated.maxRunning ?? "none"} credit_limit=${updated.creditLimit ?? "none"}`,
      );
      // Header names only: their values are never printed.
      if (shown)
        out(
          `webhooks: notification_url=${shown.notification_url ?? "none"} callback_headers=${shown.callback_headers?.join(",") ?? "none"} signature=${shown.signature}${shown.public_key ? ` public_key=${shown.public_key}` : ""}`,
        );
      return 0;
    }
    case "revoke": {
      const id = requireId(positionals, "clients revoke");
      const store = await ctx.store();
      const revoked = await revokeClient({ store, clock: systemClock, lifecycle: cliLifecycle(store, ctx) }, id);
      if (!revoked) throw new UsageError(`no client ${id}`);
      out(
        `revoked ${revoked.client.id}: its API key is refused from now on; ${revoked.canceled} task(s) not yet submitted were canceled`,
      );
      return 0;
    }
    case "rotate-secret": {
      const id = requireId(positionals, "clients rotate-secret");
      const rotated = await rotateSecret(
        { store: await ctx.store(), clock: systemClock },
        id,
        ctx.config.encryptionKey,
      );
      if (!rotated) throw new UsageError(`no client ${id}`);
      const expires = new Date(rotated.previousExpiresAt).toISOString();
      if (values.json) out(JSON.stringify({ id, webhook_secret: rotated.secret, previous_secret_expires_at: expires }));
      else {
        out(`new webhook secret: ${rotated.secret}`);
        out(`the previous secret keeps signing beside it until ${expires}`);
      }
      return 0;
    }
    default:
      throw new UsageError(`unknown command: clients ${sub}`);
  }
}
