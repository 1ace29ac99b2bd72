"use strict";

const { api } = require("./lib/api");

/**
 * A genrelay client: the relay's address and the client's API key, and its webhook secret (`v1`
 * HMAC signatures) or its ID (whose published Ed25519 keys verify `v1a` signatures), with which
 * "Task finished" checks each webhook's signature. The connection test reads one task (any answer
 * but 2xx, 401 for a wrong key, fails it) and refuses a connection with nothing to verify
 * webhooks with: one that could not tell a forged event from a real one fails closed, at setup.
 */
module.exports = {
  type: "custom",
  fields: [
    {
      key: "base_url",
      label: "Relay URL",
      type: "string",
      required: true,
      helpText: "The address of your genrelay relay, such as `https://relay.example.com`.",
    },
    {
      key: "api_key",
      label: "API Key",
      type: "password",
      required: true,
      helpText: "Your genrelay client's API key (`grk_…`).",
    },
    {
      key: "webhook_secret",
      label: "Webhook Secret",
      type: "password",
      required: false,
      helpText:
        "Your client's webhook secret (`whsec_…`); this or the Client ID is required. When set, **Task finished** checks each webhook's `v1` (HMAC) signature and stops a Zap run whose webhook does not verify.",
    },
    {
      key: "client_id",
      label: "Client ID",
      type: "string",
      required: false,
      helpText:
        "Your genrelay client's ID (`cli_…`, printed by `clients create`). When set, **Task finished** also checks `v1a` (Ed25519) signatures with the keys the relay publishes for this client: needed when the client signs with `ed25519`.",
    },
  ],
  test: async (z, bundle) => {
    const read = await z.request({ url: api(bundle, "/openapi/v1/tasks"), params: { limit: 1 } });
    const secret = String(bundle.authData.webhook_secret || "").trim();
    const clientId = String(bundle.authData.client_id || "").trim();
    if (!secret && !clientId) {
      throw new z.errors.Error(
        "Add the client's Webhook Secret (whsec_…, for hmac signing) or its Client ID (cli_…, for ed25519 signing): without one, Task Finished cannot tell a genuine webhook from a forged one.",
        "InvalidConnection",
        400,
      );
    }
    return read.data;
  },
  connectionLabel: (_z, bundle) => String(bundle.authData.base_url).replace(/^https?:\/\//, ""),
};
